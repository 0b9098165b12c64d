"""Consumer: delay-queue batch -> wait to the exact ms -> fence, read, deliver, delete.

Each record is a message pointing at one row (DelayMessage) or at a group of rows due together
(DelayGroup, docs/architecture.md "Groups"), or asks for a poll (a PollRequest, a Lambda failure
notice):
1. poison (not a pointer message for our partition) -> batch item failure, logged (ends in the
   DLQ); a group with some unusable row keys delivers the rest and fails likewise;
2. due later than ``max_wait_ms`` (a group: plus its extra wake; less when the invocation's time
   left is short, :func:`max_wait_ms`) -> ChangeMessageVisibility to its due time, batch item failure;
3. pointers re-sent for their delete only: delete (usecases/deliver.finish_deletes);
4. otherwise, in due order, runs of rows due together: wait to the last due ms, then fence their
   due seconds, read, send and delete them (usecases/deliver.py: the deletes while waiting for the
   next run or at the end);
5. poll requests and failure notices: arm one poll (usecases/ensure_poll.py).

A crash anywhere loses nothing: the batch is redelivered after the visibility timeout and the row
exists until after its event was sent (duplicates carry the same ``event_id``).
"""

from __future__ import annotations

from typing import Any

from punctual.core import metrics_names as names
from punctual.core import observability as obs
from punctual.core.clock import sleep_until
from punctual.core.consumer_rules import (
    Pending,
    PoisonMessage,
    hand_off,
    message_id_of,
    next_group,
    parse_record,
    plan_consume,
)
from punctual.core.latencies import elapsed_ms
from punctual.core.planning import MAX_EXTRA_WAKE_MS
from punctual.core.retry import call_with_retry, time_left_ms
from punctual.core.runtime import Deps
from punctual.core.usecases.consume_report import ConsumeReport
from punctual.core.usecases.deliver import delete_delivered, finish_deletes, read_rows, send_events
from punctual.core.usecases.ensure_poll import RETRY_SECONDS, arm_for_controls, control_metrics, request_poll


def queue_url_from_arn(arn: str) -> str:
    """``arn:aws:sqs:<region>:<account>:<name>`` -> the queue URL."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        return ""
    return f"https://sqs.{parts[3]}.amazonaws.com/{parts[4]}/{parts[5]}"


# Rows delivered so far are deleted before a wait of at least this long (else after the batch).
DELETE_WHILE_WAITING_MS = 50
# Kept back from the invocation's time for the reads, sends and deletes after the last wait.
SEND_RESERVE_MS = 5000


def max_wait_ms(deps: Deps) -> int:
    """How long this invocation may wait in-process for a message: ``max_wait_ms``, less when the
    invocation's time left could not cover the wait, a message's extra wake, a group's span and its sends
    (a message it cannot serve is put back to its due time instead of timing out mid-batch)."""
    s, left = deps.settings, time_left_ms(deps.clock)
    if left is None:
        return s.max_wait_ms
    return max(0, min(s.max_wait_ms, left - SEND_RESERVE_MS - MAX_EXTRA_WAKE_MS - s.group_span_ms))


def _poison(record: Any, position: int, reason: str, report: ConsumeReport) -> None:
    mid = message_id_of(record, position)
    attrs = record.get("attributes") if isinstance(record, dict) else None
    count = attrs.get("ApproximateReceiveCount") if isinstance(attrs, dict) else None
    obs.log("ERROR", "poison message", message_id=mid, reason=reason, receive_count=count)
    report.failures.append(mid)
    report.poison += 1


def _put_back(deps: Deps, queue_url: str, rec: Pending, seconds: int, report: ConsumeReport,
              what: str = "put back") -> None:
    """Return ``rec``'s message to the delay queue, visible again in ``seconds`` (0: at once, for
    another invocation), and leave it undeleted (a batch item failure)."""
    report.failures.append(rec.message_id)
    try:
        call_with_retry(
            lambda: deps.sqs.change_message_visibility(
                QueueUrl=queue_url, ReceiptHandle=rec.receipt_handle, VisibilityTimeout=seconds
            ),
            deps.clock,
        )
    except Exception as exc:  # the message returns after the queue's visibility timeout instead
        obs.log("WARNING", f"{what} failed", message_id=rec.message_id, sk=rec.message.sk, error=str(exc)[:300])
        return
    obs.log("INFO", what, message_id=rec.message_id, sk=rec.message.sk, due_ms=rec.due_ms,
            visibility_seconds=seconds)


def _deliver_runs(deps: Deps, keep: list[Pending], report: ConsumeReport) -> None:
    """The kept pointers (sorted by due), in runs due together: one wait, then fence, read, send and
    delete (the deletes in a wait, none started within DELETE_WHILE_WAITING_MS of the next run, and
    the rest at the end: they never hold back a run that is due)."""
    clock = deps.clock
    while keep:
        n, _ = next_group([rec.due_ms for rec in keep], clock.now_ms())
        group, keep = keep[:n], keep[n:]
        sleep_until(clock, group[-1].due_ms)  # one wait serves the whole group
        try:
            send_events(deps, read_rows(deps, group, report), report)
        except Exception as exc:  # an unexpected bug: retry this group, keep the rest of the batch going
            obs.log("ERROR", "delivery group failed", exc=exc,
                    message_ids=sorted({rec.message_id for rec in group}))
            report.failures += [rec.message_id for rec in group]
        if not keep:
            delete_delivered(deps, report)
        elif keep[0].due_ms - clock.now_ms() >= DELETE_WHILE_WAITING_MS:
            delete_delivered(deps, report, until_ms=keep[0].due_ms - DELETE_WHILE_WAITING_MS)


def _serve_controls(deps: Deps, report: ConsumeReport) -> None:
    """Arm one poll for the batch's poll requests and failure notices; if that must be tried again
    (ensure_poll.arm_for_controls), ask again RETRY_SECONDS later (a new message: these are done)."""
    if not report.controls:
        return
    now = deps.clock.now_ms()
    by, again = arm_for_controls(deps, report.controls)
    if again is None:
        return
    try:
        request_poll(deps, now if by is None else by, again, delay_seconds=RETRY_SECONDS)
    except Exception as err:  # noqa: BLE001 - and SQS too: SQS redelivers these messages
        obs.log("ERROR", "poll request kept", error=obs.error_text(err))
        report.failures += [c.message_id for c in report.controls]


def _emit_metrics(deps: Deps, report: ConsumeReport) -> None:
    """The invocation's metrics, in one EMF record (the counts that are zero only when always sent),
    its self-measurement with them (docs/construct.md, "Self-measurement")."""
    values: list[tuple[str, str, float | list[float]]] = [
        (names.LATENESS_MS, "Milliseconds", list(report.lateness_ms)),
        (names.DELIVERED, "Count", len(report.delivered)),
        (names.DROPPED, "Count", report.dropped),
        (names.PICKUP_MS, "Milliseconds", list(report.pickup_ms)),
    ]
    counts = ((names.PUT_BACK, report.put_back), (names.POISON_MESSAGES, report.poison),
              (names.COLD_STARTS, int(obs.cold_start())))
    for name, count in counts:
        if count:
            values.append((name, "Count", count))
    values += control_metrics(report.controls)
    obs.metrics(deps.settings, values, timestamp_ms=deps.clock.now_ms())


def _parse(records: list[Any], deps: Deps, started: int, report: ConsumeReport) -> tuple[list[Pending], str]:
    """The batch's row pointers, its controls and poison noted in ``report`` with each first-received
    message's pick-up (from its planned visibility to ``started``); and the queue's ARN."""
    parsed: list[Pending] = []
    source_arn = ""
    for position, record in enumerate(records):
        try:
            one = parse_record(record, position, deps.settings.partitions)
        except PoisonMessage as exc:
            _poison(record, position, str(exc), report)
        else:
            parsed += one.pointers
            if one.visible_ms is not None:
                report.pickup_ms.append(elapsed_ms(started, one.visible_ms))
            if one.control is not None:
                report.controls.append(one.control)
            if one.poison:
                _poison(record, position, one.poison, report)
        if isinstance(record, dict) and isinstance(record.get("eventSourceARN"), str):
            source_arn = record["eventSourceARN"]
    return parsed, source_arn


def consume(event: dict[str, Any], deps: Deps) -> dict[str, Any]:
    s, started = deps.settings, deps.clock.now_ms()
    report = ConsumeReport()
    parsed, source_arn = _parse(event.get("Records") or [] if isinstance(event, dict) else [], deps, started, report)
    plan = plan_consume(parsed, started, max_wait_ms(deps))  # parsing takes no time that counts
    queue_url = s.delay_queue_url or queue_url_from_arn(source_arn)
    for rec, seconds in plan.put_back:
        report.put_back += 1
        _put_back(deps, queue_url, rec, seconds, report)
    deliver, handed = hand_off([rec for rec in plan.keep if not rec.message.delete_only], s.consumer_max_rows)
    for rec in handed:  # rows due together: other invocations deliver these beside this one
        _put_back(deps, queue_url, rec, 0, report, what="handed off")

    finish_deletes(deps, [rec for rec in plan.keep if rec.message.delete_only], report)
    _deliver_runs(deps, deliver, report)

    _serve_controls(deps, report)
    _emit_metrics(deps, report)
    return report.response()
