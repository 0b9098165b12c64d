"""Consumer decisions: parse delay-queue records, wait or put back, group deliveries.

Pure functions of (records, now, settings); the consumer handler does the I/O.
A record is one message of a Lambda SQS event (``messageId``, ``receiptHandle``,
``body``, ``attributes``); its body is a :class:`~punctual.core.models.DelayMessage`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from .keys import InvalidKey, decode_sk
from .latencies import planned_visible_ms
from .models import DelayGroup, DelayMessage, PollRequest, RowSend, describe_partitions, in_partitions
from .planning import MAX_EXTRA_WAKE_MS, given_up_batch, group_extra_wake_ms

# SQS ChangeMessageVisibility accepts 0..43200 s (12 h).
MAX_VISIBILITY_SECONDS = 43_200
# Deliveries due within this many ms of the earliest pending one share a wait and
# one SendMessageBatch (the earliest is then at most this much later than it could be).
COALESCE_MS = 10


class PoisonMessage(ValueError):
    """A record whose body is not a usable DelayMessage: it can never be delivered."""


@dataclass(frozen=True)
class Pending:
    """One row pointer of a parsed delay-queue record (a group record holds many)."""

    message_id: str
    receipt_handle: str
    message: DelayMessage
    receive_count: int
    position: int  # index in the event (keeps the order stable among equal due times)
    # made visible this much earlier than a lone row: its message's extra_wake_ms, or for a body
    # without one its group's own (planning.extra_wake_ms), at most MAX_EXTRA_WAKE_MS
    extra_wake_ms: int = 0
    consumer_rows: int = 0  # its message's: rows an invocation holding it delivers at most (0: no limit)

    @property
    def due_ms(self) -> int:
        return self.message.due_ms

    @property
    def key(self) -> tuple[str, str]:
        return self.message.pk, self.message.sk

    @property
    def send(self) -> RowSend:
        """The send of its row this pointer names."""
        m = self.message
        return RowSend(m.pk, m.sk, m.attempt, m.enqueued_ms)


@dataclass(frozen=True)
class Control:
    """A delay-queue record that asks for a poll instead of pointing at rows: a
    :class:`~punctual.core.models.PollRequest`, or a Lambda failure notice (the OnFailure
    destination of the poller's asynchronous invocations and of the editor's stream mapping is the
    delay queue: the rows behind a failed poll or a stream batch given up on need a poll)."""

    message_id: str
    receipt_handle: str
    poll_by_ms: int | None  # None: as soon as possible
    reason: str
    notice: bool = False  # a Lambda failure notice (else a PollRequest)
    # a stream batch given up on (planning.given_up_batch): the poll takes over what it claimed
    given_up: str | None = None


@dataclass(frozen=True)
class ParsedRecord:
    pointers: list[Pending]
    poison: str | None = None  # why some pointers of a group were unusable (the rest still count)
    control: Control | None = None
    # when SQS planned the message to become visible, for a pointer received for the first time
    # (latencies.planned_visible_ms): its pick-up is the consumer's start minus this
    visible_ms: int | None = None


def failure_notice_reason(data: Mapping[str, Any]) -> str | None:
    """What a Lambda OnFailure record (an SQS destination's body) says failed, or None when
    ``data`` is not one: a stream batch given up on (``DDBStreamBatchInfo``) or an asynchronous
    invocation whose attempts ran out (``requestPayload``; an SNS destination's record may come
    without it, dropped for its size: ``responseContext`` then tells it apart)."""
    context = data.get("requestContext")
    if not isinstance(context, Mapping):
        return None
    condition = str(context.get("condition", ""))[:80]
    if isinstance(data.get("DDBStreamBatchInfo"), Mapping):
        info = data["DDBStreamBatchInfo"]
        return (f"stream records given up on ({condition}): {info.get('batchSize')} record(s) from "
                f"{str(info.get('startSequenceNumber'))[:40]}")[:300]
    if "requestPayload" in data or isinstance(data.get("responseContext"), Mapping):
        return f"asynchronous invocation failed ({condition}), {context.get('approximateInvokeCount')} attempt(s)"
    return None


def _control(mid: str, handle: str, data: Mapping[str, Any]) -> Control | None:
    if data.get("request") == "poll":
        try:
            req = PollRequest.model_validate(data, strict=True)
        except ValidationError as exc:
            raise PoisonMessage(_validation_reason("PollRequest", exc)) from exc
        return Control(mid, handle, req.poll_by_ms, req.reason[:300])
    reason = failure_notice_reason(data)
    if reason is None:
        return None
    return Control(mid, handle, None, reason, notice=True, given_up=_given_up(data.get("DDBStreamBatchInfo")))


def _given_up(info: Any) -> str | None:
    """The stream batch a notice's ``DDBStreamBatchInfo`` names (planning.given_up_batch), if any."""
    if not isinstance(info, Mapping):
        return None
    return given_up_batch(str(info.get("startSequenceNumber", "")), str(info.get("endSequenceNumber", "")))


def message_id_of(record: Mapping[str, Any], position: int) -> str:
    mid = record.get("messageId") if isinstance(record, Mapping) else None
    return mid if isinstance(mid, str) and mid else f"#{position}"


def _validation_reason(what: str, exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"body is not a {what}: {exc.error_count()} error(s), first: {first['loc']} {first['msg']}"[:300]


def _check_partition(pk: str, partition: str | Collection[str]) -> None:
    if not in_partitions(pk, partition):
        # Never read, deliver or delete rows outside the scheduler's partitions.
        raise PoisonMessage(f"pk {pk[:64]!r} is not {describe_partitions(partition)}")


def _messages(body: str, data: dict[str, Any], partition: str | Collection[str]) -> tuple[list[DelayMessage], str | None]:
    """The row pointers of a body (a DelayMessage or a DelayGroup) and why some were unusable."""
    if "rows" not in data:
        try:
            msg = DelayMessage.model_validate(data, strict=True)
        except ValidationError as exc:
            raise PoisonMessage(_validation_reason("DelayMessage", exc)) from exc
        _check_partition(msg.pk, partition)
        try:
            key = decode_sk(msg.sk)
        except InvalidKey as exc:
            raise PoisonMessage(f"sk is invalid: {exc.code}") from exc
        if key.due_ms != msg.due_ms:
            raise PoisonMessage(f"due_ms {msg.due_ms} does not match the sk ({key.due_ms})")
        return [msg], None
    try:
        group = DelayGroup.model_validate_json(body, strict=True)
    except ValidationError as exc:
        raise PoisonMessage(_validation_reason("DelayGroup", exc)) from exc
    _check_partition(group.pk, partition)
    if not group.rows:
        raise PoisonMessage("group has no rows")
    out: list[DelayMessage] = []
    bad: list[str] = []
    for sk, attempt in group.rows:
        try:
            due = decode_sk(sk).due_ms
        except InvalidKey as exc:
            bad.append(f"{sk[:64]!r}: {exc.code}")
            continue
        out.append(DelayMessage(pk=group.pk, sk=sk, due_ms=due, attempt=attempt, enqueued_ms=group.enqueued_ms,
                                delete_only=group.delete_only, extra_wake_ms=group.extra_wake_ms,
                                consumer_rows=group.consumer_rows, delay_seconds=group.delay_seconds))
    reason = f"{len(bad)} of {len(group.rows)} row key(s) invalid: {', '.join(bad[:3])}"[:300] if bad else None
    return out, reason


def parse_control(message_id: str, body: str) -> Control:
    """A control topic's message (direct delivery: no receipt handle) as a :class:`Control`, or
    :class:`PoisonMessage` with the reason when it is no poll request nor failure notice."""
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise PoisonMessage(f"body is not JSON: {str(exc)[:120]}") from exc
    control = _control(message_id, "", data) if isinstance(data, dict) else None
    if control is None:
        raise PoisonMessage("not a poll request nor a failure notice")
    return control


def parse_record(record: Mapping[str, Any], position: int, partition: str | Collection[str]) -> ParsedRecord:
    """Parse one SQS event record into its row pointers, or raise :class:`PoisonMessage` with the
    reason when none is usable. ``partition``: the scheduler's partition, or all of them."""
    if not isinstance(record, Mapping):
        raise PoisonMessage("record is not a map")
    mid, handle, body = record.get("messageId"), record.get("receiptHandle"), record.get("body")
    if not isinstance(mid, str) or not mid:
        raise PoisonMessage("record has no messageId")
    if not isinstance(handle, str) or not handle:
        raise PoisonMessage("record has no receiptHandle")
    if not isinstance(body, str):
        raise PoisonMessage("record has no body")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise PoisonMessage(f"body is not JSON: {str(exc)[:120]}") from exc
    if not isinstance(data, dict):
        raise PoisonMessage("body is not a JSON object")
    control = _control(mid, handle, data)
    if control is not None:
        return ParsedRecord([], control=control)
    messages, poison = _messages(body, data, partition)
    if not messages:
        raise PoisonMessage(poison or "no usable row pointer")
    attrs = record.get("attributes")
    count = _receive_count(attrs.get("ApproximateReceiveCount") if isinstance(attrs, Mapping) else None)
    extra = min(MAX_EXTRA_WAKE_MS, max(group_extra_wake_ms(len(messages)), messages[0].extra_wake_ms))
    pointers = [Pending(message_id=mid, receipt_handle=handle, message=msg, receive_count=count, position=position,
                        extra_wake_ms=extra, consumer_rows=messages[0].consumer_rows) for msg in messages]
    return ParsedRecord(pointers, poison, visible_ms=planned_visible_ms(attrs, messages[0].delay_seconds))


def _receive_count(raw: object) -> int:
    try:
        value = int(str(raw))
    except (TypeError, ValueError):
        return 1
    return max(1, value)


class MessageAction(StrEnum):
    DELIVER = "deliver"  # due already
    WAIT = "wait"  # due soon: wait in-process until the exact ms
    PUT_BACK = "put_back"  # due later: hide the message until its due time


@dataclass(frozen=True)
class Decision:
    action: MessageAction
    wait_ms: int = 0
    visibility_seconds: int = 0


def visibility_seconds(remaining_ms: int, max_wait_ms: int = 0) -> int:
    """VisibilityTimeout (whole seconds) for a message due ``remaining_ms`` from now.

    When the in-process wait covers a second (``max_wait_ms >= 1000``) the message is
    brought back up to 1 s *before* due (floor), so the consumer then waits to the exact
    ms instead of delivering up to 999 ms late; otherwise it comes back at or after due
    (ceil). Either way nothing is delivered early: delivery always re-checks the clock.
    """
    if max_wait_ms >= 1000:
        seconds = remaining_ms // 1000
    else:
        seconds = -(-remaining_ms // 1000)
    return max(1, min(seconds, MAX_VISIBILITY_SECONDS))


def classify(due_ms: int, now_ms: int, max_wait_ms: int) -> Decision:
    """What to do with a message due at ``due_ms`` that we hold at ``now_ms``."""
    remaining = due_ms - now_ms
    if remaining <= 0:
        return Decision(MessageAction.DELIVER)
    if remaining <= max_wait_ms:
        return Decision(MessageAction.WAIT, wait_ms=remaining)
    return Decision(MessageAction.PUT_BACK, visibility_seconds=visibility_seconds(remaining, max_wait_ms))


@dataclass
class ConsumePlan:
    put_back: list[tuple[Pending, int]]  # (record, VisibilityTimeout seconds)
    keep: list[Pending]  # sorted by due: delivered in this invocation (after a wait if needed)


def plan_consume(records: Iterable[Pending], now_ms: int, max_wait_ms: int) -> ConsumePlan:
    """Split parsed pointers into messages put back and pointers kept, the kept sorted by due.

    A message is decided as a whole, by its earliest row: one made visible ``extra_wake_ms``
    earlier than a single row (a group, a cluster's) may wait that much longer.
    A put-back message is listed once, by its earliest pointer."""
    plan = ConsumePlan(put_back=[], keep=[])
    by_message: dict[str, list[Pending]] = {}
    for rec in records:
        by_message.setdefault(rec.message_id, []).append(rec)
    for pointers in by_message.values():
        first = min(pointers, key=lambda r: r.due_ms)
        decision = classify(first.due_ms - first.extra_wake_ms, now_ms, max_wait_ms)
        if decision.action is MessageAction.PUT_BACK:
            plan.put_back.append((first, decision.visibility_seconds))
        else:
            plan.keep.extend(pointers)
    plan.keep.sort(key=lambda r: (r.due_ms, r.position))
    plan.put_back.sort(key=lambda p: (p[0].due_ms, p[0].position))
    return plan


# A message is handed to another invocation at most until its receive count reaches this: one
# received this often is kept whatever the load (each receive counts towards the delay queue's
# maxReceiveCount, 10, after which SQS moves it to the dead-letter queue).
HAND_OFF_MAX_RECEIVES = 3


def hand_off(keep: Sequence[Pending], max_rows: int) -> tuple[list[Pending], list[Pending]]:
    """Which of the kept pointers (sorted by due) this invocation delivers, and which messages it
    hands to other invocations (one pointer each: its earliest), so that rows due together are
    spread over as many consumers as Lambda runs instead of the up to ten messages one batch
    holds (docs/architecture.md, "Groups"). Messages are taken whole, in due order, while the rows
    stay within ``max_rows``, or fewer when a message says so (a cluster's share a consumer,
    planning.cluster_rows_per_consumer); the first message is always kept, and so is a message
    received ``HAND_OFF_MAX_RECEIVES`` times or more."""
    by_message: dict[str, list[Pending]] = {}
    for rec in keep:
        by_message.setdefault(rec.message_id, []).append(rec)
    kept: list[Pending] = []
    handed: list[Pending] = []
    max_rows = min([max_rows, *(p.consumer_rows for p in keep if p.consumer_rows)])
    for pointers in by_message.values():
        first = pointers[0]
        if not kept or len(kept) + len(pointers) <= max_rows or first.receive_count >= HAND_OFF_MAX_RECEIVES:
            kept += pointers
        else:
            handed.append(first)
    kept.sort(key=lambda r: (r.due_ms, r.position))
    return kept, handed


def latest_pointers(pointers: Iterable[Pending]) -> list[Pending]:
    """One pointer per row, in the order first seen: the one of the row's latest send (highest
    attempt, then latest send time; an orphan resend and its original may arrive in one batch, and
    only the latest can still be the row's send)."""
    best: dict[tuple[str, str], Pending] = {}
    for p in pointers:
        if p.key not in best or _newer(p, best[p.key]):
            best[p.key] = p
    return list(best.values())


def _newer(a: Pending, b: Pending) -> bool:
    return (a.message.attempt, a.message.enqueued_ms) > (b.message.attempt, b.message.enqueued_ms)


def next_group(dues: Sequence[int], now_ms: int, coalesce_ms: int = COALESCE_MS) -> tuple[int, int]:
    """From dues sorted ascending: (how many lead records to deliver together, ms to wait first).

    The group is every record due by ``max(now, first due) + coalesce_ms`` that is
    also due by then; the wait is until the last of them is due.
    """
    if not dues:
        return 0, 0
    horizon = max(now_ms, dues[0]) + max(0, coalesce_ms)
    n = 1
    while n < len(dues) and dues[n] <= horizon:
        n += 1
    return n, max(0, dues[n - 1] - now_ms)


def not_yet_due(dues: Iterable[int], now_ms: int) -> int:
    """ms still to wait before every due in ``dues`` has passed (0 when all are due)."""
    return max([0, *(d - now_ms for d in dues)])
