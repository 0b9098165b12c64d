"""Use case "send": claim tasks and send them to the delay queue, shared by the poll and the
stream batch (the editor's fast path).

Claim every task (a conditional write per row), group the claimed rows due within
``group_span_ms`` of each other into one delay-queue message (planning.group_by_due), send
the messages with DelaySeconds recomputed at send time (a poll's each at the moment that makes it
visible ``aligned_wake_ms`` before due: planning.aligned_send_times), and release the claims of a
message whose send failed for good. A crash between claim and send leaves claimed rows that the
orphan check resends later: late, never lost, never early.

In direct delivery (Settings.delivery) the message is the task's delivered event itself, sent to
the delivery queue at the moment that makes it visible on its due ms + the early margin
(:func:`_deliver`); the rows
sent are then taken out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Container, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from punctual.core import metrics_names as names
from punctual.core import observability as obs
from punctual.core.clock import Clock, sleep_until
from punctual.core.config import MAX_DELAY_SECONDS, Settings
from punctual.core.keys import due_second
from punctual.core.models import DelayGroup, DeliveredEvent, RowSend, Task, delivery_body
from punctual.core.parallel import Skipped, pmap_or_stop
from punctual.core.planning import (
    aligned_send_times,
    delay_seconds,
    direct_delay_seconds,
    direct_target_ms,
    extra_wake_ms,
    group_by_due,
    group_extra_wake_ms,
    message_consumer_rows,
    rows_per_second,
)
from punctual.core.queues import Failed, Outgoing, send_all
from punctual.core.retry import time_left_ms
from punctual.core.store import claim, delete_sent, release

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient


@dataclass
class SendReport:
    sent: list[Task] = field(default_factory=list)
    skipped: list[Task] = field(default_factory=list)  # claimed by someone else / gone
    # not sent, still to send: the send failed for good (claim released), or the table refused the
    # claim (the caller makes sure a poll comes for them)
    failed: list[Task] = field(default_factory=list)


def _claim_all(ddb: DynamoDBClient, s: Settings, clock: Clock, tasks: Sequence[Task],
               token: str | Mapping[str, str] | None, take_over: Container[str],
               report: SendReport) -> tuple[list[tuple[Task, int]], bool]:
    """Claim each task, ``s.send_workers`` at a time: (the task as claimed: its attempt the row's
    after the claim, claim time) for the claimed, and whether the table refused a claim; the rest go
    to ``report``: skipped (someone else holds it, or it is gone) or failed (the table refused the
    claim; once it does, the rest are not tried)."""
    def one(task: Task) -> tuple[Task, int] | None:
        now = clock.now_ms()
        mine = token.get(task.sk) if isinstance(token, Mapping) else token
        attempt = claim(ddb, s, clock, task, now, mine, take_over)
        return None if attempt is None else (task.model_copy(update={"attempt": attempt, "enqueued_ms": now}), now)

    claimed: list[tuple[Task, int]] = []
    refused = False
    for task, got, exc in pmap_or_stop(one, tasks, s.send_workers):
        if exc is not None:
            refused = True
            if not isinstance(exc, Skipped):
                obs.log("ERROR", "claim failed; left to a poll", sk=task.sk,
                        error=obs.error_text(exc))
            report.failed.append(task)
        elif got is None:
            report.skipped.append(task)
        else:
            claimed.append(got)
    return claimed, refused


def _pointer_bytes(task: Task) -> int:
    return len(json.dumps([task.sk, task.attempt], ensure_ascii=False).encode("utf-8")) + 1


def _groups(claimed: Sequence[tuple[Task, int]], span_ms: int) -> list[tuple[int, ...]]:
    """The delay-queue messages for ``claimed`` (sorted by due), as indexes into it: rows of one
    partition due together (planning.group_by_due), earliest first; a message points into one
    partition (docs/architecture.md, "Shards")."""
    by_pk: dict[str, list[int]] = {}
    for i, (task, _) in enumerate(claimed):
        by_pk.setdefault(task.pk, []).append(i)
    groups = [
        tuple(idx[j] for j in run)
        for idx in by_pk.values()
        for run in group_by_due([claimed[i][0].due_ms for i in idx], [_pointer_bytes(claimed[i][0]) for i in idx],
                                span_ms)
    ]
    return sorted(groups, key=lambda g: claimed[g[0]][0].due_ms)


# Rows claimed, then sent, at a time: a poll with many rows sends the earliest while it claims the
# rest, instead of sending nothing until every row is claimed (a claim is a write per row: ~1 ms of
# the poller's CPU each, so 50,000 rows due together took ~1.5 min before any was sent).
SEND_CHUNK_ROWS = 1000
# No chunk is started with less than this left before the invocation's deadline: claiming, sending
# and (direct delivery) deleting 1,000 rows takes ~4 s of the poller's CPU at 1,024 MB, more under
# throttling. The rows not started are left to a poll (the caller arms one soon).
CHUNK_RESERVE_MS = 30_000


def claim_and_send(ddb: DynamoDBClient, sqs: SQSClient, s: Settings, clock: Clock, tasks: Sequence[Task],
                   token: str | Mapping[str, str] | None = None, take_over: Container[str] = (),
                   align: bool = False) -> SendReport:
    """Claim ``tasks`` (sorted by due) and send them in groups, ``s.send_workers`` calls at a time,
    ``SEND_CHUNK_ROWS`` at a time in due order; once the table refuses a claim, the rest are not
    tried (failed: the caller makes sure a poll comes for them).

    ``token`` (one for all, or by sk) names the work the claims belong to: a retry of that work
    (the same token) may claim and resend rows an earlier, crashed attempt claimed
    (docs/architecture.md, "A retry finishes what a crashed attempt claimed"); so may work holding a
    token of ``take_over`` (a poll that took over the lease of one that died).

    ``align``: messages are sent aligned to their due ms (``s.aligned_wake_ms``, :func:`_send`)
    when the rows fit one chunk (a bigger send must not wait a second a chunk)."""
    report = SendReport()
    clusters = rows_per_second(t.due_ms for t in tasks)
    align = align and s.aligned_wake_ms > 0 and len(tasks) <= SEND_CHUNK_ROWS
    for start in range(0, len(tasks), SEND_CHUNK_ROWS):
        chunk = tasks[start : start + SEND_CHUNK_ROWS]
        left = time_left_ms(clock)
        if start and left is not None and left < CHUNK_RESERVE_MS:
            # a chunk started now could be cut by the invocation's timeout, and its retry would send
            # again what it had sent: the rest are left to a poll, as when the table refuses
            obs.log("WARNING", "out of time: rows left to a poll", rows=len(tasks) - start, time_left_ms=left)
            report.failed += tasks[start:]
            break
        if s.direct:
            done = _claim_and_deliver_chunk(ddb, sqs, s, clock, chunk, token, take_over, report)
        else:
            done = _claim_and_send_chunk(ddb, sqs, s, clock, chunk, token, take_over, clusters, align, report)
        if not done:
            report.failed += tasks[start + SEND_CHUNK_ROWS :]  # the table refused: not tried
            break
    return report


def _claim_and_send_chunk(ddb: DynamoDBClient, sqs: SQSClient, s: Settings, clock: Clock, tasks: Sequence[Task],
                          token: str | Mapping[str, str] | None, take_over: Container[str],
                          clusters: Mapping[int, int], align: bool, report: SendReport) -> bool:
    """Claim and send ``tasks``; False when the table refused a claim (the rest of them not tried).
    ``clusters``: how many rows of the whole send are due in each second (planning.rows_per_second):
    a message of a big cluster is made visible early enough for Lambda to scale its consumers."""
    claimed, refused = _claim_all(ddb, s, clock, tasks, token, take_over, report)
    if not claimed:
        return not refused
    groups = _groups(claimed, s.group_span_ms)
    cluster = {g: clusters[due_second(claimed[g[0]][0].due_ms)] for g in groups}  # every row is counted
    extra = {g: extra_wake_ms(len(g), cluster[g], s.consumer_max_rows) for g in groups}
    out = [
        _pointer(g, partial(
            DelayGroup.body_of, claimed[g[0]][0].pk,
            [(claimed[i][0].sk, claimed[i][0].due_ms, claimed[i][0].attempt) for i in g],
            max(claimed[i][1] for i in g), extra_wake_ms=extra[g],
            consumer_rows=message_consumer_rows(cluster[g], s.consumer_max_rows)))
        for g in groups
    ]

    # a message of a cluster that needs many consumers keeps its early wake; the others may be aligned
    alignable = {g for g in groups if extra[g] == group_extra_wake_ms(len(g))} if align else set()
    due = {g: claimed[g[0]][0].due_ms for g in groups}
    failures = {f.ref: f for f in _send(sqs, s, clock, out, due, extra, alignable)}
    _settle(ddb, s, clock, claimed, groups, failures, report)
    return not refused


def _pointer(ref: object, body_of: Callable[..., str]) -> Outgoing:
    """A delay-queue message whose body names the DelaySeconds it is sent with (``body_of(
    delay_seconds=...)``; the consumer's pick-up counts from them), its size estimated with the most."""
    return Outgoing(ref=ref, body=body_of(delay_seconds=MAX_DELAY_SECONDS),
                    render=lambda _now_ms, delay_s: body_of(delay_seconds=delay_s))


def _settle(ddb: DynamoDBClient, s: Settings, clock: Clock, claimed: Sequence[tuple[Task, int]],
            messages: Sequence[tuple[int, ...]], failures: Mapping[Any, Failed],
            report: SendReport) -> list[tuple[Task, int]]:
    """Note the rows of each message (indexes into ``claimed``) as sent, or, when SQS did not take it
    (``failures``, by message), release their claims; the claims sent."""
    sent: list[tuple[Task, int]] = []
    for g in messages:
        failure = failures.get(g)
        for i in g:
            task, at = claimed[i]
            if failure is None:
                report.sent.append(task)
                sent.append(claimed[i])
                continue
            obs.log("ERROR", "send failed; claim released", sk=task.sk, code=failure.code, error=failure.message,
                    counted=failure.sender_fault)
            release(ddb, s, clock, task, at, counts=failure.sender_fault)
            report.failed.append(task)
    return sent


# Aligned sends take up to a second: not started with less than this left before the deadline.
ALIGN_RESERVE_MS = 5000


def _claim_and_deliver_chunk(ddb: DynamoDBClient, sqs: SQSClient, s: Settings, clock: Clock, tasks: Sequence[Task],
                             token: str | Mapping[str, str] | None, take_over: Container[str],
                             report: SendReport) -> bool:
    """Direct delivery (docs/architecture.md, "Direct delivery"): claim ``tasks``, send each one's
    event to the delivery queue (:func:`_deliver`), release the claims of the events SQS did not
    take, and take the sent rows out; False when the table refused a claim (the rest not tried).
    A crash before the rows are taken out leaves them claimed: the orphan check sends them again (a
    duplicate, with the same event id)."""
    claimed, refused = _claim_all(ddb, s, clock, tasks, token, take_over, report)
    if not claimed:
        return not refused
    visible: dict[int, int] = {}  # index -> when its event becomes visible, as sent
    failures = {(f.ref,): f for f in _deliver(sqs, s, clock, [task for task, _ in claimed], visible)}
    sent = _settle(ddb, s, clock, claimed, [(i,) for i in range(len(claimed))], failures, report)
    # the consumer's metrics (its lateness alarm and dashboard), with the lateness each send planned
    lateness = [task.lateness_ms(visible[i]) for i, (task, _) in enumerate(claimed) if (i,) not in failures]
    obs.metrics(s, [(names.LATENESS_MS, "Milliseconds", lateness), (names.DELIVERED, "Count", len(lateness))],
                timestamp_ms=clock.now_ms())
    _, left, _ = delete_sent(ddb, s, clock, [RowSend(t.pk, t.sk, t.attempt, at) for t, at in sent])
    for row in left:
        obs.log("WARNING", "sent row not taken out; its orphan check sends it again", sk=row.sk)
    return not refused


def _deliver(sqs: SQSClient, s: Settings, clock: Clock, tasks: Sequence[Task],
             visible: dict[int, int]) -> list[Failed]:
    """Send each task's event to the delivery queue, failures returned (``ref``: the task's index).
    Each goes at its phase (planning.aligned_send_times, ``near``) for its target
    (planning.direct_target_ms: due + ``s.direct_early_margin_ms``, or its due ms when under a second
    away and waited for). Its DelaySeconds (planning.direct_delay_seconds), from a clock read right before the call
    (before SQS can start its timer), are none once due, else rounded up towards due + the margin: it
    is visible at its target at the earliest under an exact timer, and at most ``s.align_step_ms``
    after it. One whose phase is more than ``s.direct_max_wait_ms`` away goes at once, visible less
    than ``1000 - direct_max_wait_ms`` after due + the margin. With less than ALIGN_RESERVE_MS of the
    invocation left, all go at once (each up to a second after due + the margin). ``visible`` gets, by
    index, when each event sent becomes visible (its body's ``delivered_at``)."""
    def render(i: int, now_ms: int, delay_s: int) -> str:
        visible[i] = now_ms + delay_s * 1000
        return direct_body(tasks[i], s, now_ms, delay_s)

    now, margin = clock.now_ms(), s.direct_early_margin_ms
    wait = s.direct_max_wait_ms
    plan = (aligned_send_times([direct_target_ms(t.due_ms, now, margin, wait) for t in tasks], now, s.align_step_ms,
                               near=True, max_wait_ms=wait)
            if _time_to_align(clock) else [(now, list(range(len(tasks))))])
    out = [Outgoing(ref=i, body=direct_body(t, s, t.due_ms, 0), render=partial(render, i)) for i, t in enumerate(tasks)]
    return _send_at(sqs, s.delivery_queue_url, s, clock, [(at, [out[i] for i in idx]) for at, idx in plan],
                    lambda o: direct_delay_seconds(tasks[o.ref].due_ms, clock.now_ms(), margin))  # type: ignore[call-overload]


def direct_body(task: Task, s: Settings, now_ms: int, delay_s: int) -> str:
    """The delivered event of ``task`` sent at ``now_ms`` with ``delay_s`` DelaySeconds (direct
    delivery): ``delivered_at`` is when SQS's timer makes it visible, ``lateness_ms`` that against
    the due ms (docs/architecture.md, "Direct delivery")."""
    event = DeliveredEvent.for_task(task, now_ms + delay_s * 1000, task.attempt)
    return delivery_body(event, task, s.event_format)


def _send(sqs: SQSClient, s: Settings, clock: Clock, out: Sequence[Outgoing], due: Mapping[Any, int],
          extra: Mapping[Any, int], alignable: AbstractSet[object]) -> list[Failed]:
    """Send ``out`` (``ref``: a group; ``due``: its first row's due ms), failures returned. A message
    is made visible ``s.wake_early_ms`` + its ``extra`` wake before its due ms, or up to a second
    after that (DelaySeconds are whole seconds, rounded up).

    When at least ``s.align_min_messages`` of them are ``alignable``, those are sent last, each at
    its phase (planning.aligned_send_times): visible ``s.aligned_wake_ms`` + its extra wake before
    its due ms, or at most ``s.align_step_ms`` after that. The rest go at once."""
    aligned = [o for o in out if o.ref in alignable]
    if len(aligned) < s.align_min_messages or not _time_to_align(clock):
        aligned = []
    now = clock.now_ms()
    plan = aligned_send_times([due[o.ref] - s.aligned_wake_ms - extra[o.ref] for o in aligned], now, s.align_step_ms)
    timed = {aligned[i].ref for _, idx in plan for i in idx}
    wake = {o.ref: (s.aligned_wake_ms if o.ref in timed else s.wake_early_ms) + extra[o.ref] for o in out}
    batches = [(now, [o for o in out if o.ref not in timed])] + [(at, [aligned[i] for i in idx]) for at, idx in plan]
    return _send_at(sqs, s.delay_queue_url, s, clock, batches,
                    lambda o: delay_seconds(due[o.ref], clock.now_ms(), wake[o.ref]))


def _time_to_align(clock: Clock) -> bool:
    """Whether the invocation has ALIGN_RESERVE_MS left for sends that wait up to a second."""
    left = time_left_ms(clock)
    return left is None or left >= ALIGN_RESERVE_MS


def _send_at(sqs: SQSClient, url: str, s: Settings, clock: Clock, batches: Sequence[tuple[int, Sequence[Outgoing]]],
             delay_for: Callable[[Outgoing], int]) -> list[Failed]:
    """Send each batch of messages at its time (none before it), ``s.send_workers`` calls at a
    time, DelaySeconds from ``delay_for`` right before each call; the failures."""
    failed: list[Failed] = []
    for at, batch in batches:
        sleep_until(clock, at)
        failed += send_all(sqs, url, batch, clock, workers=s.send_workers, delay_for=delay_for)
    return failed

