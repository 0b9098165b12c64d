"""Tasks, delay-queue messages, delivered events and rejections (pydantic).

A *row* is a DynamoDB item in attribute-value form; :func:`task_from_item` turns
it into a :class:`Task` or raises :class:`RowRejected` with a reason code.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .clock import iso_ms
from .config import EVENT_FORMATS, META_PK
from .ddbjson import UnsupportedValue, from_plain, item_to_plain, to_plain
from .keys import InvalidKey, decode_sk
from .wire import dumps

# Bookkeeping attributes Punctual writes on a row (prefixed so user rows never clash).
ATTR_ENQUEUED_MS = "punctual_enqueued_ms"
ATTR_ATTEMPT = "punctual_attempt"
# Who claimed the row last: the poll (its EventBridge event id, the same in Lambda's retries of
# that invocation), so a retry of a poll that died after claiming resends at once
# (docs/architecture.md, "A retry finishes the poll it retries").
ATTR_CLAIM = "punctual_claim"
# How many times a claim of the row was taken over from work that died (store.claim): such claims
# add no attempt, so this bounds a row that kills whoever claims it (planning.MAX_TAKEOVERS).
ATTR_TAKEOVERS = "punctual_takeovers"
# Set by a claim in direct delivery (Settings.delivery): the claim is the send of the event itself, so
# from then on a cancel or a reschedule answers AlreadyEnqueued (client.cancel); a release removes it.
ATTR_DIRECT = "punctual_direct"
# When a row written after its due time was written (its stream record's creation, whole seconds):
# set by the editor's claim of such a row, so lateness counts from then (Task.ready_ms), not from a
# due time Punctual never had the row for (docs/construct.md, "Lateness").
ATTR_WRITTEN_MS = "punctual_written_ms"
# SQS caps a message at 256 KiB; the envelope (key up to 1 KiB, times, ids) needs < 4 KiB.
MAX_EVENT_BYTES = 262_144
MAX_PAYLOAD_BYTES = MAX_EVENT_BYTES - 4096
EVENT_NAMESPACE = uuid.UUID("6b1c3f0e-5d0a-4c7e-9a55-70756e637475")


class RowRejected(ValueError):
    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class Task(BaseModel):
    model_config = ConfigDict(frozen=True)

    pk: str
    sk: str
    id: str
    due_ms: int
    payload: dict[str, Any]
    enqueued_ms: int | None = None
    attempt: int = 0
    claim_token: str | None = None  # ATTR_CLAIM
    takeovers: int = 0  # ATTR_TAKEOVERS
    written_ms: int | None = None  # ATTR_WRITTEN_MS: written after its due time, at this ms
    # The row's payload attribute as read ({"M": ...}): the cdk-scheduler event format sends it
    # as it is, so numbers keep their text ("1.50"), sets and binary their type.
    payload_av: dict[str, Any] | None = Field(default=None, exclude=True, repr=False)

    @property
    def event_id(self) -> str:
        return event_id(self.pk, self.sk)

    @property
    def ready_ms(self) -> int:
        """The earliest the task could be delivered: its due time, or when it was written if that
        was later (a "run now" put past due, a redriven row). Lateness counts from here."""
        return max(self.due_ms, self.written_ms or self.due_ms)

    def lateness_ms(self, delivered_at_ms: int) -> int:
        """What Punctual took to deliver it: from :attr:`ready_ms` (the ``LatenessMs`` metric; the
        delivered event's ``lateness_ms`` counts from the due time)."""
        return delivered_at_ms - self.ready_ms

    def payload_ddb_json(self) -> dict[str, Any]:
        """The payload attribute as DynamoDB JSON (binary as base64 text)."""
        return _jsonable(self.payload_av if self.payload_av is not None else from_plain(self.payload))


def event_id(pk: str, sk: str) -> str:
    """Stable id of the delivery of row (pk, sk): the same on every duplicate."""
    return str(uuid.uuid5(EVENT_NAMESPACE, f"{pk}\x00{sk}"))


def _plain_str(item: dict[str, Any], name: str) -> str | None:
    av = item.get(name)
    if isinstance(av, dict) and "S" in av and isinstance(av["S"], str):
        return av["S"]
    return None


def _plain_int(item: dict[str, Any], name: str) -> int | None:
    """An integral number attribute, else None (absent, not a number, or fractional)."""
    av = item.get(name)
    if isinstance(av, dict) and "N" in av:
        try:
            value = to_plain(av)
        except UnsupportedValue:
            return None
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def in_partitions(pk: str, partition: str | Collection[str]) -> bool:
    """Whether ``pk`` is the scheduler's partition (a str) or one of them; never the meta one."""
    return pk != META_PK and (pk == partition if isinstance(partition, str) else pk in partition)


def describe_partitions(partition: str | Collection[str]) -> str:
    if isinstance(partition, str):
        return f"the scheduler partition {partition!r}"
    names = sorted(partition)
    if len(names) == 1:
        return f"the scheduler partition {names[0]!r}"
    return f"one of the scheduler's {len(names)} partitions ({names[0]!r}, {names[1]!r}, ...)"


def task_from_item(item: dict[str, Any], partition: str | Collection[str], event_format: str = "punctual") -> Task:
    """Validate one row (attribute-value form) as a task, or raise :class:`RowRejected`.

    ``partition``: the scheduler's partition key value, or all of them (``Settings.partitions``).

    The size limit applies to the payload as ``event_format`` (a Settings.event_format) delivers it.
    """
    return sized_for(_task_from_item(item, partition), event_format)


def sized_for(task: Task, event_format: str) -> Task:
    """``task`` if its payload fits a delivered event of ``event_format``, else :class:`RowRejected`.

    The payload is measured as plain JSON by every validation; cdk-scheduler's body carries it as
    DynamoDB JSON, which is larger ({"N":"1"} for 1): measured again in that form.
    """
    if event_format not in EVENT_FORMATS:
        raise ValueError(f"event_format must be one of {EVENT_FORMATS}, got {event_format!r}")
    if event_format != "cdk-scheduler":
        return task
    try:
        size = len(dumps(task.payload_ddb_json()).encode("utf-8"))
    except (UnsupportedValue, ValueError, RecursionError) as exc:
        raise RowRejected("payload_unsupported", str(exc)[:200]) from exc
    if size > MAX_PAYLOAD_BYTES:
        raise RowRejected("oversize", f"payload is {size} bytes as DynamoDB JSON, limit {MAX_PAYLOAD_BYTES}")
    return task


def _task_from_item(item: dict[str, Any], partition: str | Collection[str]) -> Task:
    if not isinstance(item, dict):
        raise RowRejected("malformed", "row is not a map")
    pk = _plain_str(item, "pk")
    if pk is None:
        raise RowRejected("wrong_pk", "pk is missing or not a string")
    if not in_partitions(pk, partition):
        raise RowRejected("wrong_pk", f"pk {pk[:64]!r} is not {describe_partitions(partition)}")
    if "sk" not in item:
        raise RowRejected("malformed", "sk is missing")
    sk = _plain_str(item, "sk")
    if sk is None:
        raise RowRejected("not_a_string", "sk is not a string attribute")
    try:
        key = decode_sk(sk)
    except InvalidKey as exc:
        raise RowRejected(exc.code, exc.reason) from exc
    if "payload" not in item:
        raise RowRejected("missing_payload", "payload attribute is missing")
    raw = item["payload"]
    if not isinstance(raw, dict) or "M" not in raw:
        kind = next(iter(raw), "?") if isinstance(raw, dict) else type(raw).__name__
        raise RowRejected("payload_not_map", f"payload must be a map (M), got {kind}")
    try:
        payload = to_plain(raw)
    except (UnsupportedValue, RecursionError) as exc:
        raise RowRejected("payload_unsupported", str(exc)[:200]) from exc
    try:
        size = len(dumps(payload).encode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise RowRejected("payload_unsupported", str(exc)[:200]) from exc
    if size > MAX_PAYLOAD_BYTES:
        raise RowRejected("oversize", f"payload is {size} bytes as JSON, limit {MAX_PAYLOAD_BYTES}")
    # Punctual's own bookkeeping, if a writer set it, must be what Punctual writes: an integer.
    # Anything else could never be claimed (the claim compares it) or would make every claim
    # fail with a ValidationException, holding the row -- or the whole poll -- forever.
    for attr in (ATTR_ENQUEUED_MS, ATTR_ATTEMPT, ATTR_TAKEOVERS):
        if attr in item and _plain_int(item, attr) is None:
            raise RowRejected("bad_bookkeeping", f"{attr} is reserved for Punctual and must be an integer number")
    return Task(
        pk=pk,
        sk=sk,
        id=key.id,
        due_ms=key.due_ms,
        payload=payload,
        enqueued_ms=_plain_int(item, ATTR_ENQUEUED_MS),
        attempt=_plain_int(item, ATTR_ATTEMPT) or 0,
        claim_token=_plain_str(item, ATTR_CLAIM),
        takeovers=_plain_int(item, ATTR_TAKEOVERS) or 0,
        written_ms=_plain_int(item, ATTR_WRITTEN_MS),
        payload_av=raw,
    )


def item_key(item: dict[str, Any]) -> dict[str, Any]:
    """The primary key of a row, as attribute values."""
    return {"pk": item["pk"], "sk": item["sk"]}


@dataclass(frozen=True)
class RowSend:
    """A row and the send of it a delay-queue pointer names: the row's attempt for that send and the
    pointer's ``enqueued_ms`` (no earlier than the row's claim for that send)."""

    pk: str
    sk: str
    attempt: int
    enqueued_ms: int

    def holds(self, mark: tuple[int, int | None]) -> bool:
        """Whether a row with this send mark (:func:`send_mark`) is still that send: the same attempt,
        claimed no later than the pointer's send. A put over the key since has no mark, or a later
        one once claimed (a new task); an orphan resend has a higher attempt. The consumer's delete
        has the same condition (store.SAME_SEND)."""
        attempt, enqueued_ms = mark
        return attempt == self.attempt and enqueued_ms is not None and enqueued_ms <= self.enqueued_ms


def send_mark(item: dict[str, Any]) -> tuple[int, int | None]:
    """The send a row holds, as written by the last claim: (``punctual_attempt``, 0 when absent;
    ``punctual_enqueued_ms``, None when absent). Read without validating the rest of the row."""
    return _plain_int(item, ATTR_ATTEMPT) or 0, _plain_int(item, ATTR_ENQUEUED_MS)


def _without_defaults(data: dict[str, Any], **defaults: Any) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in defaults or v != defaults[k]}


class DelayMessage(BaseModel):
    """Body of a delay-queue message: a pointer to the row, never its payload. ``delete_only``: the
    row's event was sent; only its deletion is left (a consumer whose delete failed re-sends the
    pointer so: the event is not sent again)."""

    pk: str
    sk: str
    due_ms: int
    attempt: int = 1
    enqueued_ms: int
    delete_only: bool = False
    # made visible this much earlier than a lone row (planning.extra_wake_ms): the consumer may hold
    # it that much longer (absent in bodies from before it existed: a group's own extra applies)
    extra_wake_ms: int = Field(default=0, ge=0)
    # rows an invocation holding it delivers at most (planning.cluster_rows_per_consumer); 0: the
    # consumer's own consumer_max_rows
    consumer_rows: int = Field(default=0, ge=0)
    # the DelaySeconds it was sent with (absent in bodies from before it existed): the consumer's
    # pick-up counts from its SentTimestamp plus these (latencies.planned_visible_ms)
    delay_seconds: int | None = Field(default=None, ge=0)

    def body(self) -> str:
        return dumps(_without_defaults(self.model_dump(), delete_only=False, extra_wake_ms=0, consumer_rows=0,
                                       delay_seconds=None))


class DelayGroup(BaseModel):
    """Body of a delay-queue message pointing at several rows due within one short span
    (docs/architecture.md, "Groups"), never their payloads. A group of one row is sent as a
    :class:`DelayMessage`, the format of every message before groups existed."""

    pk: str
    due_ms: int  # the earliest due of its rows
    enqueued_ms: int
    rows: list[tuple[str, int]]  # (sk, attempt of this send), in due order
    delete_only: bool = False  # as DelayMessage's
    extra_wake_ms: int = Field(default=0, ge=0)  # as DelayMessage's
    consumer_rows: int = Field(default=0, ge=0)  # as DelayMessage's
    delay_seconds: int | None = Field(default=None, ge=0)  # as DelayMessage's

    def body(self) -> str:
        return dumps(_without_defaults(self.model_dump(), delete_only=False, extra_wake_ms=0, consumer_rows=0,
                                       delay_seconds=None))

    @staticmethod
    def body_of(pk: str, rows: list[tuple[str, int, int]], enqueued_ms: int, delete_only: bool = False,
                extra_wake_ms: int = 0, consumer_rows: int = 0, delay_seconds: int | None = None) -> str:
        """The delay-queue body for ``rows`` = (sk, due_ms, attempt), sorted by due, sent with
        ``delay_seconds``."""
        if len(rows) == 1:
            sk, due, attempt = rows[0]
            return DelayMessage(pk=pk, sk=sk, due_ms=due, attempt=attempt, enqueued_ms=enqueued_ms,
                                delete_only=delete_only, extra_wake_ms=extra_wake_ms,
                                consumer_rows=consumer_rows, delay_seconds=delay_seconds).body()
        return DelayGroup(pk=pk, due_ms=rows[0][1], enqueued_ms=enqueued_ms,
                          rows=[(sk, attempt) for sk, _, attempt in rows], delete_only=delete_only,
                          extra_wake_ms=extra_wake_ms, consumer_rows=consumer_rows,
                          delay_seconds=delay_seconds).body()


class PollRequest(BaseModel):
    """Body of a delay-queue message asking the consumer to make sure a poll starts by
    ``poll_by_ms`` (the first minute still safe to arm when that has passed): sent by a poll that
    failed and by an editor that could not arm, so that a schedule whose table or rule is failing
    is re-armed through SQS (docs/architecture.md, "When arming fails")."""

    model_config = ConfigDict(extra="forbid")

    request: str = "poll"
    poll_by_ms: int
    reason: str = ""

    def body(self) -> str:
        return dumps(self.model_dump())


class DeliveredEvent(BaseModel):
    """Body of each delivery-queue message (see README: delivered event)."""

    model_config = ConfigDict(populate_by_name=True)

    event_id: str
    id: str
    key: str
    due: str
    due_ms: int
    payload: dict[str, Any]
    delivered_at: str
    delivered_at_ms: int
    lateness_ms: int
    attempt: int
    publication_timestamp: int = Field(alias="publicationTimestamp")

    @classmethod
    def for_task(cls, task: Task, delivered_at_ms: int, attempt: int) -> DeliveredEvent:
        return cls(
            event_id=task.event_id,
            id=task.id,
            key=task.sk,
            due=iso_ms(task.due_ms),
            due_ms=task.due_ms,
            payload=task.payload,
            delivered_at=iso_ms(delivered_at_ms),
            delivered_at_ms=delivered_at_ms,
            lateness_ms=delivered_at_ms - task.due_ms,
            attempt=attempt,
            publicationTimestamp=task.due_ms,
        )

    def body(self) -> str:
        return dumps(self.model_dump(by_alias=True))


def cdk_scheduler_body(task: Task) -> str:
    """cdk-scheduler's message body, byte for byte as its published build (npm 0.1.3,
    ``build/lib/functions/sendEventsToSQSAndDeleteRecords.js``) writes it with ``JSON.stringify``:
    ``{"publicationTimestamp": <the sk's text before "#", a string>, "payload": <the payload
    attribute as DynamoDB JSON, {"M": ...}>}``, in that key order (docs/migrating.md). It has no
    event id: its consumers dedupe on the whole body (identical for every duplicate: map keys are
    sorted)."""
    timestamp = dumps(task.sk.split("#", 1)[0])
    return f'{{"publicationTimestamp":{timestamp},"payload":{dumps(task.payload_ddb_json())}}}'


def delivery_body(event: DeliveredEvent, task: Task, event_format: str) -> str:
    """The delivery-queue body of ``task`` in ``event_format`` (a Settings.event_format)."""
    if event_format == "cdk-scheduler":
        return cdk_scheduler_body(task)
    if event_format == "punctual":
        return event.body()
    raise ValueError(f"event_format must be one of {EVENT_FORMATS}, got {event_format!r}")


class Rejection(BaseModel):
    """What an operator sees for a refused row (rejected-rows queue body and log line), and what
    ``punctual redrive`` needs to put it back (README, "Rejected rows"): the table, and the whole row
    in DynamoDB JSON with binary as base64 text, unless ``item_complete`` is false (a row too big
    for one SQS message is cut to its key and attribute names)."""

    code: str
    reason: str
    pk: str | None = None
    sk: str | None = None
    source: str
    rejected_at: str
    table: str | None = None
    item: dict[str, Any] = Field(default_factory=dict, description="the row as DynamoDB JSON")
    item_complete: bool = True

    @classmethod
    def of(cls, item: dict[str, Any], exc: RowRejected, source: str, now_ms: int,
           table: str | None = None) -> Rejection:
        rejection = cls(
            code=exc.code,
            reason=exc.reason,
            pk=_plain_str(item, "pk") if isinstance(item, dict) else None,
            sk=_plain_str(item, "sk") if isinstance(item, dict) else None,
            source=source,
            rejected_at=iso_ms(now_ms),
            table=table,
            item=_jsonable(item),
            item_complete=isinstance(item, dict),
        )
        return rejection._fit()

    def _fit(self) -> Rejection:
        """Keep the record under the SQS message limit (a row may be up to 400 KB).

        An oversize rejection that cannot be queued would fail its whole stream
        batch / poll again and again (a poison row blocking valid ones): drop the
        largest attributes instead, naming them and their sizes.
        """
        if len(self.body().encode("utf-8")) <= MAX_EVENT_BYTES - 1024:
            return self
        sizes = {k: len(dumps(v).encode("utf-8")) for k, v in self.item.items()}
        kept = dict(self.item)
        omitted: dict[str, int] = {}
        for name in sorted(sizes, key=sizes.get, reverse=True):  # type: ignore[arg-type]
            if name in ("pk", "sk"):
                continue
            kept.pop(name)
            omitted[name] = sizes[name]
            trial = self.model_copy(update={"item_complete": False, "item": {**kept, "_omitted_bytes": {"M": {
                k: {"N": str(v)} for k, v in omitted.items()}}}})
            if len(trial.body().encode("utf-8")) <= MAX_EVENT_BYTES - 1024:
                return trial
        return self.model_copy(update={"item_complete": False,
                                       "item": {k: v for k, v in self.item.items() if k in ("pk", "sk")}})

    def body(self) -> str:
        """JSON for the rejected-rows queue; a row too big for one SQS message is cut to
        its key and attribute names (the reason still says what was wrong)."""
        text = dumps(self.model_dump())
        size = len(text.encode("utf-8"))
        if size <= MAX_REJECTION_BYTES:
            return text
        item = self.item if isinstance(self.item, dict) else {}
        slim: dict[str, Any] = {k: item[k] for k in ("pk", "sk") if k in item and len(dumps(item[k])) <= 2048}
        slim["_truncated"] = {
            "note": f"row omitted: the rejection was {size} bytes, over the SQS limit",
            "attributes": sorted(str(k) for k in item)[:100],
        }
        return dumps(self.model_copy(update={"item": slim, "item_complete": False}).model_dump())


# One SQS message (the rejected-rows queue); rows can be up to 400 KB in DynamoDB.
MAX_REJECTION_BYTES = 262_144


def _jsonable(item: Any) -> dict[str, Any]:
    """The raw row in DynamoDB JSON, with binary as base64 so it can be queued."""
    import base64

    def walk(v: Any) -> Any:
        if isinstance(v, (bytes, bytearray)):
            return base64.b64encode(bytes(v)).decode("ascii")
        if isinstance(v, dict):
            return {str(k): walk(x) for k, x in v.items()}
        if isinstance(v, (list, tuple, set)):
            return [walk(x) for x in v]
        return v

    return walk(item) if isinstance(item, dict) else {"value": repr(item)[:1000]}


def plain_item(item: dict[str, Any]) -> dict[str, Any]:
    return item_to_plain(item)
