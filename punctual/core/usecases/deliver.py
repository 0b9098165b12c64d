"""Use case "deliver a run": the rows a run of delay-queue pointers due together point at, at
their due millisecond (the consumer calls it after its wait).

1. **fence** each row (``store.fence``: one conditional write that marks it as being delivered
   by this pointer and reads it): a row gone, sent again since, or taken by another pointer is
   dropped; a row that became invalid is rejected. A cancel landing before the fence wins; one
   after it answers AlreadyDelivered (docs/architecture.md, "Cancellation never lies");
2. **send** the events (the clock re-read first: never early); an event SQS refuses for its
   content rejects its row (``undeliverable``); one SQS failed to take is un-fenced and retried;
3. **delete** each delivered row while it still holds our mark (``store.delete_fenced``): a row
   put over it since is a new task, never deleted by a delivery that read the old one.

Whatever the table or SQS would not do now is retried by a copy of its pointer sent back to the
delay queue ``RETRY_SECONDS`` later (:func:`retry_later`), never by letting SQS redeliver the
message: the message's receive count does not grow (no trip to the delay DLQ, no resend by the
poll, no attempt used) however long the outage, and a row whose event was sent is retried for its
delete only (``delete_only``), so an outage of the delete costs no duplicate.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from punctual.core import observability as obs
from punctual.core.clock import sleep_until
from punctual.core.consumer_rules import Pending, latest_pointers, not_yet_due
from punctual.core.keys import decode_sk
from punctual.core.models import DelayGroup, DeliveredEvent, RowRejected, Task, delivery_body, task_from_item
from punctual.core.parallel import Skipped, pmap_or_stop
from punctual.core.queues import Failed, Outgoing, send_all
from punctual.core.runtime import Deps
from punctual.core.store import delete_fenced, fence, reject_row, unfence
from punctual.core.usecases.ensure_poll import RETRY_SECONDS

if TYPE_CHECKING:
    from punctual.core.usecases.consume import ConsumeReport


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def fence_rows(deps: Deps, group: list[Pending], report: ConsumeReport) -> list[tuple[Pending, Task]]:
    """Fence and read the rows of ``group``; what to deliver, the rest resolved or retried later."""
    s = deps.settings
    recs = latest_pointers(group)
    for rec in group:
        if rec not in recs:  # an orphan resend and its original in one batch: the latest serves both
            obs.log("INFO", "duplicate in batch", message_id=rec.message_id, sk=rec.message.sk)

    def one(rec: Pending) -> dict[str, Any] | None:
        m = rec.message
        return fence(deps.ddb, s, deps.clock, m.pk, m.sk, m.attempt, rec.token)

    out: list[tuple[Pending, Task]] = []
    later: list[Pending] = []
    for rec, item, exc in pmap_or_stop(one, recs, s.send_workers):
        if exc is not None:
            if not isinstance(exc, Skipped):
                obs.log("ERROR", "fence failed; retried later", sk=rec.message.sk, error=_error(exc))
            later.append(rec)
        elif item is None:
            report.dropped += 1
            obs.log("INFO", "dropped", reason="row gone (cancelled, rescheduled, delivered), sent again since, "
                    "or being delivered by another pointer", message_id=rec.message_id, sk=rec.message.sk,
                    due_ms=rec.due_ms)
        else:
            try:
                out.append((rec, task_from_item(item, s.partitions, s.event_format)))
            except RowRejected as bad:
                _reject(deps, rec, item, bad, report)
    retry_later(deps, later, report)
    return out


def _reject(deps: Deps, rec: Pending, item: dict[str, Any], exc: RowRejected, report: ConsumeReport) -> None:
    try:
        reject_row(deps.ddb, deps.sqs, deps.settings, deps.clock, item, exc, "consumer")
        report.rejected += 1
    except Exception as err:  # noqa: BLE001 - the message comes back and tries again
        obs.log("ERROR", "reject failed", message_id=rec.message_id, sk=rec.message.sk, error=_error(err))
        report.failures.append(rec.message_id)


def send_events(deps: Deps, todo: list[tuple[Pending, Task]], report: ConsumeReport) -> None:
    """Send the fenced rows' events; each sent one waits in ``report.undeleted`` for its delete."""
    s, clock = deps.settings, deps.clock
    if not todo:
        return
    # Never early: re-check the clock right before sending (a wall clock may step back).
    now = clock.now_ms()
    if not_yet_due([task.due_ms for _, task in todo], now):
        sleep_until(clock, max(task.due_ms for _, task in todo))
        now = clock.now_ms()
    events = [DeliveredEvent.for_task(task, delivered_at_ms=now, attempt=rec.receive_count) for rec, task in todo]
    out = [Outgoing(ref=i, body=delivery_body(ev, task, s.event_format))
           for i, (ev, (_, task)) in enumerate(zip(events, todo, strict=True))]
    failed = {f.ref: f for f in send_all(deps.sqs, s.delivery_queue_url, out, clock, workers=s.send_workers)}
    unsent: list[tuple[Pending, Task]] = []
    sent: list[tuple[Pending, Task, DeliveredEvent]] = []
    for i, ((rec, task), ev) in enumerate(zip(todo, events, strict=True)):
        failure = failed.get(i)
        if failure is None:
            sent.append((rec, task, ev))
            report.delivered.append(ev)
            report.undeleted.append((rec, task))
        elif failure.sender_fault:
            _refused(deps, rec, task, failure, report)
        else:
            obs.log("ERROR", "delivery send failed; retried later", message_id=rec.message_id, sk=task.sk,
                    code=failure.code, error=failure.message)
            unsent.append((rec, task))
    _log_delivered(s.log_payloads, sent)
    _retry_unsent(deps, unsent, report)


# Deliveries named by one "delivered" line at most (a line stays far below CloudWatch Logs' 256 KB).
LOG_LINE_DELIVERIES = 500


def _log_delivered(log_payloads: bool, sent: list[tuple[Pending, Task, DeliveredEvent]]) -> None:
    """One "delivered" line per run and partition (every :data:`LOG_LINE_DELIVERIES`), not per event:
    the keys and their lateness in order, the run's one delivery time, the delay-queue messages.
    A row's ``event_id`` is a function of its pk and key (models.event_id). The log bytes of a task
    due with others are then a few dozen (docs/benchmark.md, "Cost floors"). With ``log_payloads``
    every event gets its own line, payload included (a debugging aid)."""
    if log_payloads:
        for rec, _, ev in sent:
            obs.log("INFO", "delivered", message_id=rec.message_id, event_id=ev.event_id, key=ev.key,
                    due_ms=ev.due_ms, delivered_at_ms=ev.delivered_at_ms, lateness_ms=ev.lateness_ms,
                    attempt=ev.attempt, send_attempt=rec.message.attempt, payload=ev.payload)
        return
    by_pk: dict[str, list[tuple[Pending, DeliveredEvent]]] = defaultdict(list)
    for rec, task, ev in sent:
        by_pk[task.pk].append((rec, ev))
    for pk, pairs in by_pk.items():
        for i in range(0, len(pairs), LOG_LINE_DELIVERIES):
            part = pairs[i:i + LOG_LINE_DELIVERIES]
            fields: dict[str, Any] = dict(
                pk=pk, count=len(part), delivered_at_ms=part[0][1].delivered_at_ms, keys=[ev.key for _, ev in part],
                lateness_ms=[ev.lateness_ms for _, ev in part], message_ids=sorted({rec.message_id for rec, _ in part}))
            if any(ev.attempt != 1 for _, ev in part):  # redelivered by SQS (a crash or a timeout before)
                fields["attempts"] = [ev.attempt for _, ev in part]
            obs.log("INFO", "delivered", **fields)


def _refused(deps: Deps, rec: Pending, task: Task, failure: Failed, report: ConsumeReport) -> None:
    """SQS refused the event for its content: no send will ever pass. Rejected, visibly."""
    reason = f"the delivery queue refused its event: {failure.code}: {failure.message}"[:300]
    item = {"pk": {"S": task.pk}, "sk": {"S": task.sk}, "payload": task.payload_av or {"M": {}}}
    _reject(deps, rec, item, RowRejected("undeliverable", reason), report)


def _retry_unsent(deps: Deps, unsent: list[tuple[Pending, Task]], report: ConsumeReport) -> None:
    """Take back the fences of events SQS did not take (a cancel may win again meanwhile, and the
    orphan clock restarts), then retry them later; a fence left in place is still ours: the copy
    carries the same token."""
    now = deps.clock.now_ms()

    def one(pair: tuple[Pending, Task]) -> bool:
        rec, task = pair
        return unfence(deps.ddb, deps.settings, deps.clock, task.pk, task.sk, rec.token, now)

    for (rec, _), _, exc in pmap_or_stop(one, unsent, deps.settings.send_workers):
        if exc is not None and not isinstance(exc, Skipped):
            obs.log("WARNING", "unfence failed", sk=rec.message.sk, error=_error(exc))
    retry_later(deps, [rec for rec, _ in unsent], report)


def delete_delivered(deps: Deps, report: ConsumeReport) -> None:
    """Delete the rows delivered so far while they hold our mark; a delete the table refuses is
    retried later, for the delete only (the event is not sent again)."""
    todo, report.undeleted = report.undeleted, []
    if not todo:
        return

    def one(pair: tuple[Pending, Task]) -> bool:
        rec, task = pair
        return delete_fenced(deps.ddb, deps.settings, deps.clock, task.pk, task.sk, rec.token)

    later: list[Pending] = []
    for (rec, task), deleted, exc in pmap_or_stop(one, todo, deps.settings.send_workers):
        if exc is not None:
            if not isinstance(exc, Skipped):
                obs.log("ERROR", "delete after delivery failed; retried later", sk=task.sk, error=_error(exc))
            later.append(rec)
        elif not deleted:
            obs.log("INFO", "not deleted: written again since it was read (a new task)", sk=task.sk)
    retry_later(deps, later, report, delete_only=True)


def finish_deletes(deps: Deps, recs: list[Pending], report: ConsumeReport) -> None:
    """Pointers re-sent for their delete only (``delete_only``): delete, never send."""
    report.undeleted += [(rec, _key_task(rec)) for rec in latest_pointers(recs)]
    delete_delivered(deps, report)


def _key_task(rec: Pending) -> Task:
    """The row a delete-only pointer names (its key is all a delete needs)."""
    m = rec.message
    return Task(pk=m.pk, sk=m.sk, id=decode_sk(m.sk).id, due_ms=m.due_ms, payload={}, attempt=m.attempt)


def retry_later(deps: Deps, recs: list[Pending], report: ConsumeReport, delete_only: bool = False) -> None:
    """Send copies of ``recs``'s pointers back to the delay queue, ``RETRY_SECONDS`` later (one
    message per original message and partition); the originals are done. If SQS refuses, their
    messages are failed instead and come back after the visibility timeout."""
    if not recs:
        return
    s = deps.settings
    by_message: dict[tuple[str, str, int], list[Pending]] = defaultdict(list)
    for rec in recs:
        by_message[(rec.message_id, rec.message.pk, rec.message.enqueued_ms)].append(rec)
    out = [Outgoing(ref=mid, delay_seconds=RETRY_SECONDS, body=DelayGroup.body_of(
        pk, [(r.message.sk, r.due_ms, r.message.attempt) for r in sorted(group, key=lambda r: r.due_ms)],
        enqueued_ms, delete_only=delete_only))
        for (mid, pk, enqueued_ms), group in by_message.items()]
    refused = send_all(deps.sqs, s.delay_queue_url, out, deps.clock, workers=s.send_workers)
    for f in refused:
        obs.log("ERROR", "retry copy refused; the message comes back instead", message_id=f.ref, code=f.code)
        report.failures.append(str(f.ref))
    obs.log("WARNING", "retried later", rows=len(recs), delete_only=delete_only, delay_seconds=RETRY_SECONDS)
