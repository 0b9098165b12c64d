"""Use case "deliver a run": the rows a run of delay-queue pointers due together point at, at
their due millisecond (the consumer calls it after its wait).

1. **fence** the run's due seconds (``store.fence_second``: one item per partition and due second,
   once per invocation), then **read** its rows with one consistent Query per partition
   (``store.rows_between``). A row gone (cancelled, rescheduled, delivered), sent again since (a
   newer pointer delivers it) or written over (a new task) is dropped; a row that became invalid
   is rejected. A cancel landing before the fence wins (the read does not see its row); one after
   it answers AlreadyDelivered (docs/architecture.md, "Cancellation never lies");
2. **send** the events (the clock re-read first: never early); an event SQS refuses for its
   content rejects its row (``undeliverable``); one SQS failed to take is retried later;
3. **delete** the delivered rows while each is still the send delivered (``store.delete_sent``:
   a conditional DeleteItem a row, after the run's sends): a row put over
   since is a new task, never deleted by a delivery that read the old one.

Whatever the table or SQS would not do now is retried by a copy of its pointer sent back to the
delay queue ``RETRY_SECONDS`` later (:func:`retry_later`), never by letting SQS redeliver the
message: the message's receive count does not grow (no trip to the delay DLQ, no resend by the
poll, no attempt used) however long the outage, and a row whose event was sent is retried for its
delete only (``delete_only``), so an outage of the delete costs no duplicate.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from punctual.core import observability as obs
from punctual.core.clock import sleep_until
from punctual.core.consumer_rules import Pending, latest_pointers, not_yet_due
from punctual.core.keys import due_second
from punctual.core.models import DelayGroup, DeliveredEvent, RowRejected, Task, delivery_body, send_mark, task_from_item
from punctual.core.parallel import Skipped, pmap_or_stop
from punctual.core.queues import Failed, Outgoing, send_all
from punctual.core.runtime import Deps
from punctual.core.store import delete_sent, fence_second, reject_row, restart_orphan_clock, rows_between
from punctual.core.usecases.consume_report import ConsumeReport
from punctual.core.usecases.ensure_poll import RETRY_SECONDS


def read_rows(deps: Deps, group: list[Pending], report: ConsumeReport) -> list[tuple[Pending, Task]]:
    """Fence the due seconds of ``group`` and read its rows; what to deliver, the rest resolved or
    retried later. One fence and one Query per partition the run points into (side by side)."""
    recs = latest_pointers(group)
    for rec in group:
        if rec not in recs:  # an orphan resend and its original in one batch: the latest serves both
            obs.log("INFO", "duplicate in batch", message_id=rec.message_id, sk=rec.message.sk)
    by_pk: dict[str, list[Pending]] = defaultdict(list)
    for rec in recs:
        by_pk[rec.message.pk].append(rec)
    out: list[tuple[Pending, Task]] = []
    later: list[Pending] = []
    for part, rows, exc in pmap_or_stop(lambda part: _fence_and_read(deps, part, report.fenced), list(by_pk.values()),
                                        deps.settings.send_workers):
        if exc is not None:
            if not isinstance(exc, Skipped):
                obs.log("ERROR", "fence or read failed; retried later", sks=[r.message.sk for r in part][:10],
                        error=obs.error_text(exc))
            later += part
        else:
            out += _resolve(deps, part, rows or {}, report)
    retry_later(deps, later, report)
    return out


def _fence_and_read(deps: Deps, recs: list[Pending], fenced: set[tuple[str, int]]) -> dict[str, dict[str, Any]]:
    """The rows of ``recs`` (one partition) by sk, read after their due seconds were fenced (a fence
    written earlier in this invocation is not written again: it never goes away)."""
    s, clock, pk = deps.settings, deps.clock, recs[0].message.pk
    for second in sorted({due_second(rec.due_ms) for rec in recs} - {sec for p, sec in fenced if p == pk}):
        fence_second(deps.ddb, s, clock, pk, second, clock.now_ms())
        fenced.add((pk, second))
    sks = [rec.message.sk for rec in recs]
    return rows_between(deps.ddb, s, clock, min(sks), max(sks), pk=pk)


def _resolve(deps: Deps, recs: list[Pending], rows: dict[str, dict[str, Any]],
             report: ConsumeReport) -> list[tuple[Pending, Task]]:
    s = deps.settings
    out: list[tuple[Pending, Task]] = []
    for rec in recs:
        item = rows.get(rec.message.sk)
        if item is None or not rec.send.holds(send_mark(item)):
            report.dropped += 1
            obs.log("INFO", "dropped", reason="row gone (cancelled, rescheduled, delivered), sent again since, "
                    "or written over (a new task)", message_id=rec.message_id, sk=rec.message.sk, due_ms=rec.due_ms)
            continue
        try:
            out.append((rec, task_from_item(item, s.partitions, s.event_format)))
        except RowRejected as bad:
            _reject(deps, rec, item, bad, report)
    return out


def _reject(deps: Deps, rec: Pending, item: dict[str, Any], exc: RowRejected, report: ConsumeReport) -> None:
    try:
        reject_row(deps.ddb, deps.sqs, deps.settings, deps.clock, item, exc, "consumer")
        report.rejected += 1
    except Exception as err:  # noqa: BLE001 - the message comes back and tries again
        obs.log("ERROR", "reject failed", message_id=rec.message_id, sk=rec.message.sk, error=obs.error_text(err))
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
            report.lateness_ms.append(task.lateness_ms(ev.delivered_at_ms))
            report.undeleted.append(rec)
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
    """Retry later the events SQS did not take; their rows' orphan clocks restart (the poll leaves
    them to the copies, which carry the new send time, instead of using an attempt)."""
    now = deps.clock.now_ms()

    def one(pair: tuple[Pending, Task]) -> bool:
        return restart_orphan_clock(deps.ddb, deps.settings, deps.clock, pair[0].send, now)

    for (rec, _), _, exc in pmap_or_stop(one, unsent, deps.settings.send_workers):
        if exc is not None and not isinstance(exc, Skipped):
            obs.log("WARNING", "orphan clock not restarted", sk=rec.message.sk, error=obs.error_text(exc))
    retry_later(deps, [rec for rec, _ in unsent], report, enqueued_ms=now)


def delete_delivered(deps: Deps, report: ConsumeReport, until_ms: int | None = None) -> None:
    """Delete the rows delivered so far while each is still the send delivered, starting none after
    ``until_ms`` (the next run's due time: those stay for a later wait or the end); a delete the
    table refuses is retried later, for the delete only (the event is not sent again)."""
    todo, report.undeleted = report.undeleted, []
    if not todo:
        return
    written_over, left, untried = delete_sent(deps.ddb, deps.settings, deps.clock, [rec.send for rec in todo],
                                              until_ms)
    for send in written_over:
        obs.log("INFO", "not deleted: written again since it was read (a new task)", sk=send.sk)
    not_yet = {(send.pk, send.sk) for send in untried}
    report.undeleted = [rec for rec in todo if rec.key in not_yet]
    undone = {(send.pk, send.sk) for send in left}
    later = [rec for rec in todo if rec.key in undone]
    if later:
        obs.log("ERROR", "delete after delivery failed; retried later", rows=len(later))
    retry_later(deps, later, report, delete_only=True)


def finish_deletes(deps: Deps, recs: list[Pending], report: ConsumeReport) -> None:
    """Pointers re-sent for their delete only (``delete_only``): delete, never send."""
    report.undeleted += latest_pointers(recs)
    delete_delivered(deps, report)


def retry_later(deps: Deps, recs: list[Pending], report: ConsumeReport, delete_only: bool = False,
                enqueued_ms: int | None = None) -> None:
    """Send copies of ``recs``'s pointers back to the delay queue, ``RETRY_SECONDS`` later (one
    message per original message and partition), with the originals' send time or ``enqueued_ms``
    (a restarted orphan clock); the originals are done. If SQS refuses, their messages are failed
    instead and come back after the visibility timeout."""
    if not recs:
        return
    s = deps.settings
    by_message: dict[tuple[str, str, int], list[Pending]] = defaultdict(list)
    for rec in recs:
        sent_ms = rec.message.enqueued_ms if enqueued_ms is None else enqueued_ms
        by_message[(rec.message_id, rec.message.pk, sent_ms)].append(rec)
    out = [Outgoing(ref=mid, delay_seconds=RETRY_SECONDS, body=DelayGroup.body_of(
        pk, [(r.message.sk, r.due_ms, r.message.attempt) for r in sorted(group, key=lambda r: r.due_ms)],
        sent_ms, delete_only=delete_only, delay_seconds=RETRY_SECONDS))
        for (mid, pk, sent_ms), group in by_message.items()]
    refused = send_all(deps.sqs, s.delay_queue_url, out, deps.clock, workers=s.send_workers)
    for f in refused:
        obs.log("ERROR", "retry copy refused; the message comes back instead", message_id=f.ref, code=f.code)
        report.failures.append(str(f.ref))
    obs.log("WARNING", "retried later", rows=len(recs), delete_only=delete_only, delay_seconds=RETRY_SECONDS)
