"""Python client for services: schedule, list, cancel and reschedule tasks.

The client writes exactly the documented row (``pk`` S, ``sk`` S ``"<13-digit ms>#<id>"``,
``payload`` M) and validates it with the same code the stream handler uses, so a
client insert and a raw insert are the same thing. The key (``sk``) returned by
:meth:`PunctualClient.schedule` is the task's handle for get/cancel/reschedule.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from punctual.core.clock import Clock, SystemClock, iso_ms, to_epoch_ms
from punctual.core.config import META_PK, Settings
from punctual.core.ddbjson import UnsupportedValue, from_plain
from punctual.core.errors import error_code, is_conditional_failure, is_retryable
from punctual.core.keys import MAX_DUE_MS, InvalidKey, decode_sk, encode_sk, fence_key, validate_id
from punctual.core.models import ATTR_DIRECT, ATTR_ENQUEUED_MS, RowRejected, Task, item_key, task_from_item
from punctual.core.redrive import EXISTS, SKIPPED, NotRedrivable, fresh_row, parse_rejection
from punctual.core.retry import call_with_retry, retry_unprocessed, retry_wait_ms
from punctual.core.store import (
    CHECK_FAILED,
    across_partitions,
    cancellation_codes,
    get_row,
    item_sk,
    query_from,
    row_key,
)

from .errors import (
    AlreadyDelivered,
    AlreadyEnqueued,
    AlreadyExists,
    InvalidSchedule,
    NotFound,
    PartialWrite,
    PunctualError,
)

BATCH_WRITE = 25
# A message redrive leaves on the queue stays hidden this long while the run goes on (so it is
# not read twice), and is made visible again when the run ends.
REDRIVE_VISIBILITY_S = 300
# Epoch ms before 2001-09-09 have fewer than 13 digits: almost surely epoch seconds.
MIN_PLAUSIBLE_MS = 1_000_000_000_000

When = datetime | int


@dataclass(frozen=True)
class ScheduledTask:
    """A pending task. ``key`` (the row's sk) is the handle for get/cancel/reschedule."""

    key: str
    id: str
    due_ms: int
    payload: dict[str, Any]
    enqueued_ms: int | None = None  # set once Punctual has pushed it to the delay queue
    attempt: int = 0

    @property
    def due(self) -> datetime:
        return datetime.fromtimestamp(self.due_ms / 1000, tz=UTC)

    @property
    def due_iso(self) -> str:
        return iso_ms(self.due_ms)

    @property
    def in_flight(self) -> bool:
        return self.enqueued_ms is not None

    @classmethod
    def of(cls, task: Task) -> ScheduledTask:
        return cls(task.sk, task.id, task.due_ms, task.payload, task.enqueued_ms, task.attempt)


@dataclass(frozen=True)
class RedriveLeft:
    """A rejected-rows message :meth:`PunctualClient.redrive` left on the queue, and why
    (``why``: one of punctual.core.redrive's UNREADABLE, SKIPPED, OTHER_TABLE, TRUNCATED,
    INVALID, EXISTS)."""

    message_id: str
    key: str | None  # the row's sk, when the message names it
    code: str | None  # the rejection's reason code ("undeliverable", "payload_not_map", ...)
    why: str
    detail: str


@dataclass
class RedriveReport:
    redriven: list[ScheduledTask] = field(default_factory=list)  # written back, their message deleted
    left: list[RedriveLeft] = field(default_factory=list)  # still on the queue

    @property
    def problems(self) -> list[RedriveLeft]:
        """The messages left for a reason other than a ``codes`` filter."""
        return [x for x in self.left if x.why != SKIPPED]


def to_due_ms(at: Any) -> int:
    """Aware datetime or integer epoch ms -> epoch ms, or :class:`InvalidSchedule`."""
    if isinstance(at, datetime):
        try:
            ms = to_epoch_ms(at)
        except (ValueError, OverflowError) as exc:
            raise InvalidSchedule(str(exc), "naive_datetime") from exc
    elif isinstance(at, bool) or at is None:
        raise InvalidSchedule(f"due time must be an aware datetime or epoch ms, got {at!r}", "bad_time")
    elif isinstance(at, int):
        ms = at
    elif isinstance(at, float):
        if not math.isfinite(at) or at != int(at):
            raise InvalidSchedule(f"due time {at!r} is not a whole number of epoch ms", "bad_time")
        ms = int(at)
    else:
        raise InvalidSchedule(f"due time must be an aware datetime or epoch ms, got {type(at).__name__}", "bad_time")
    if not isinstance(at, datetime) and 0 <= ms < MIN_PLAUSIBLE_MS:
        # only a bare number can be seconds by mistake; an aware datetime of 1999 is just far past
        raise InvalidSchedule(f"due time {ms} looks like epoch seconds; give epoch milliseconds", "seconds_not_ms")
    if ms >= MAX_DUE_MS:
        raise InvalidSchedule("due time is after 2199-12-31T23:59:59.999Z", "year_out_of_range")
    if ms < 0:
        raise InvalidSchedule("due time is before 1970", "negative")
    return ms


def _bound_ms(at: Any) -> int:
    """A list() bound: like a due time, but any instant from 1970 to 2200 is fine."""
    if isinstance(at, int) and not isinstance(at, bool) and 0 <= at <= MAX_DUE_MS:
        return at
    if isinstance(at, datetime):
        try:
            return min(max(to_epoch_ms(at), 0), MAX_DUE_MS)
        except (ValueError, OverflowError) as exc:
            raise InvalidSchedule(str(exc), "naive_datetime") from exc
    return to_due_ms(at)


def task_key(key_or_task: Any) -> str:
    """The sk of a task handle (a key string or a :class:`ScheduledTask`), validated."""
    key = key_or_task.key if isinstance(key_or_task, ScheduledTask) else key_or_task
    try:
        decode_sk(key)
    except InvalidKey as exc:
        raise InvalidSchedule(f"not a task key: {exc.reason}", exc.code) from exc
    return key


class PunctualClient:
    """Schedule one-off tasks in a Punctual table.

    ``ddb`` is a boto3 low-level DynamoDB client (created with ``boto3.client("dynamodb")``
    on first use when omitted); ``clock`` only matters for retries and for telling
    :class:`AlreadyDelivered` from :class:`NotFound`.

    ``delivery`` and ``window_seconds``: the deployment's (construct props ``delivery`` and
    ``window``). In direct delivery a task that is no longer pending and due within the window is
    reported as :class:`AlreadyEnqueued` (sent, or cancelled before: the table cannot tell), not
    :class:`NotFound`. They never change what a cancel does, only which error names a missing row:
    a cancel that returns stopped the delivery whatever they say.
    """

    def __init__(
        self,
        table_name: str,
        partition_key_value: str = "scheduler",
        *,
        shards: int = 1,
        delivery: str = "consumer",
        window_seconds: int = 900,
        ddb: Any = None,
        clock: Clock | None = None,
        sqs: Any = None,
    ):
        try:
            self.settings = Settings(table_name=table_name, partition_key_value=partition_key_value, shards=shards,
                                     delivery=delivery, window_seconds=window_seconds,
                                     lead_seconds=min(Settings.lead_seconds, max(0, window_seconds - 60)))
        except ValueError as exc:
            raise InvalidSchedule(str(exc), "bad_partition") from exc
        self._ddb = ddb
        self._sqs = sqs
        self.clock: Clock = clock or SystemClock()

    @property
    def table_name(self) -> str:
        return self.settings.table_name

    @property
    def partition_key_value(self) -> str:
        return self.settings.partition_key_value

    @property
    def shards(self) -> int:
        return self.settings.shards

    @property
    def ddb(self) -> Any:
        if self._ddb is None:
            import boto3

            self._ddb = boto3.client("dynamodb")
        return self._ddb

    @property
    def sqs(self) -> Any:
        """The SQS client :meth:`redrive` reads the rejected-rows queue with."""
        if self._sqs is None:
            import boto3

            self._sqs = boto3.client("sqs")
        return self._sqs

    # -- building rows ------------------------------------------------------
    def build_item(self, at: When, payload: Mapping[str, Any], id: str | None = None) -> tuple[dict[str, Any], Task]:
        """The row for a task (attribute values) and its validated :class:`Task`; writes nothing."""
        due_ms = to_due_ms(at)
        task_id = uuid.uuid4().hex if id is None else id
        try:
            validate_id(task_id)
            sk = encode_sk(due_ms, task_id)
        except InvalidKey as exc:
            raise InvalidSchedule(exc.reason, exc.code) from exc
        if not isinstance(payload, Mapping):
            raise InvalidSchedule(f"payload must be a dict, got {type(payload).__name__}", "payload_not_map")
        try:
            av = from_plain(dict(payload))
        except (UnsupportedValue, RecursionError) as exc:
            raise InvalidSchedule(f"payload is not storable as JSON: {exc}", "payload_unsupported") from exc
        item = {"pk": {"S": self.settings.partition_for(task_id)}, "sk": {"S": sk}, "payload": av}
        try:  # the very check the stream handler runs: client rows are never rejected later
            task = task_from_item(item, self.settings.partitions)
        except RowRejected as exc:
            raise InvalidSchedule(exc.reason, exc.code) from exc
        return item, task

    # -- writes -------------------------------------------------------------
    def schedule(self, at: When, payload: Mapping[str, Any], id: str | None = None) -> ScheduledTask:
        """Schedule ``payload`` for delivery at ``at`` (aware datetime or epoch ms).

        Raises :class:`InvalidSchedule` (nothing written) or :class:`AlreadyExists`
        when a task with the same due ms and id but another payload exists (scheduling
        the identical task again is a no-op, so retries are safe).
        """
        item, task = self.build_item(at, payload, id)
        try:
            call_with_retry(
                lambda: self.ddb.put_item(
                    TableName=self.table_name, Item=item, ConditionExpression="attribute_not_exists(sk)"
                ),
                self.clock,
            )
        except Exception as exc:
            if not is_conditional_failure(exc):
                raise
            # Same key: fine if it is the very same task (our own earlier attempt, whose
            # response was lost, or a caller retrying with the same id); an error otherwise.
            existing = get_row(self.ddb, self.settings, self.clock, task.pk, task.sk)
            if existing is None or self._task(existing, task.sk).payload != task.payload:
                raise AlreadyExists(task.sk) from exc
        return ScheduledTask.of(task)

    def schedule_many(self, items: Iterable[Any], max_attempts: int = 8) -> list[ScheduledTask]:
        """Schedule many tasks with BatchWriteItem (25 per call).

        ``items``: ``(at, payload)`` or ``(at, payload, id)`` tuples, or mappings with
        keys ``at``, ``payload`` and optional ``id``. Every item is validated before
        anything is written. Unprocessed items are retried with backoff; if some are
        still unwritten after ``max_attempts`` calls, :class:`PartialWrite` is raised
        (retrying with the same ids is safe). Unlike :meth:`schedule`, an existing row
        with the same key is overwritten (BatchWriteItem has no conditions).
        """
        built: list[tuple[dict[str, Any], Task]] = []
        for n, spec in enumerate(items):
            if isinstance(spec, Mapping):
                unknown = set(spec) - {"at", "payload", "id"}
                if unknown or "at" not in spec or "payload" not in spec:
                    raise InvalidSchedule(f"item {n}: expected keys at, payload and optional id", "bad_item")
                args = (spec["at"], spec["payload"], spec.get("id"))
            elif isinstance(spec, tuple) and len(spec) in (2, 3):
                args = (spec[0], spec[1], spec[2] if len(spec) == 3 else None)
            else:
                raise InvalidSchedule(f"item {n}: expected (at, payload[, id]) or a mapping", "bad_item")
            try:
                built.append(self.build_item(*args))
            except InvalidSchedule as exc:
                raise InvalidSchedule(f"item {n}: {exc}", exc.code) from exc
        keys = [task.sk for _, task in built]
        if len(set(keys)) != len(keys):
            raise InvalidSchedule("two items have the same due ms and id", "duplicate_key")
        unwritten: list[str] = []
        for start in range(0, len(built), BATCH_WRITE):
            chunk = built[start : start + BATCH_WRITE]
            unwritten += self._batch_write([item for item, _ in chunk], max_attempts)
        tasks = [ScheduledTask.of(task) for _, task in built]
        if unwritten:
            lost = set(unwritten)
            raise PartialWrite([t for t in tasks if t.key not in lost], unwritten)
        return tasks

    def _batch_write(self, items: list[dict[str, Any]], max_attempts: int) -> list[str]:
        def write(pending: list[dict[str, Any]]) -> list[dict[str, Any]]:
            resp = self.ddb.batch_write_item(RequestItems={self.table_name: pending})
            return list((resp.get("UnprocessedItems") or {}).get(self.table_name) or [])

        left = retry_unprocessed(write, [{"PutRequest": {"Item": item}} for item in items], self.clock,
                                 attempts=max_attempts)
        return [r["PutRequest"]["Item"]["sk"]["S"] for r in left]

    def cancel(self, key: Any) -> ScheduledTask:
        """Delete a pending task (even one already pushed to the delay queue: the
        consumer drops it). Returns what was cancelled; raises :class:`NotFound` or
        :class:`AlreadyDelivered` when there is no such pending row.

        A cancel that returns stops the delivery; one that loses the race to it raises
        :class:`AlreadyDelivered` and changes nothing. It loses from the moment the first delivery
        of the tasks due in the same second (same partition) begins: at most one second before the
        task's due time (docs/architecture.md, "Cancellation never lies")."""
        sk = task_key(key)
        current = self._pending(sk)
        if self._write_unless_delivering(sk, [self._delete_op(current)]):
            raise self._gone(sk)  # gone, or sent (direct delivery), since it was read
        return self._task(current, sk)

    def reschedule(self, key: Any, at: When) -> ScheduledTask:
        """Move a pending task to ``at`` atomically (TransactWriteItems: delete the old
        row, put the new one with the same id and payload). The old delivery is stopped
        even if it was already pushed to the delay queue; once it began (as for :meth:`cancel`),
        :class:`AlreadyDelivered` is raised and no new task is made."""
        sk = task_key(key)
        current = self._pending(sk)
        old = self._task(current, sk)
        item, task = self.build_item(at, old.payload, old.id)
        if task.sk == sk:
            return old
        item["payload"] = current["payload"]  # byte-for-byte, not a plain-JSON round trip
        codes = self._write_unless_delivering(sk, [
            self._delete_op(current),
            {"Put": {"TableName": self.table_name, "Item": item, "ConditionExpression": "attribute_not_exists(sk)"}},
        ])
        if codes and codes[0] == CHECK_FAILED:
            raise self._gone(sk)
        if codes:
            raise AlreadyExists(task.sk)
        return ScheduledTask.of(task)

    def _delete_op(self, current: dict[str, Any]) -> dict[str, Any]:
        """Delete the row while it exists and is not sent to the delivery queue already (direct
        delivery's claim marks it: store.claim)."""
        return {"Delete": {"TableName": self.table_name, "Key": item_key(current),
                           "ConditionExpression": "attribute_exists(sk) AND attribute_not_exists(#d)",
                           "ExpressionAttributeNames": {"#d": ATTR_DIRECT}}}

    def _pending(self, sk: str) -> dict[str, Any]:
        """The row ``sk`` while a cancel or reschedule can still stop it; else the error that says why."""
        current = self._read(sk)
        if current is None:
            raise self._missing(sk)
        if ATTR_DIRECT in current:
            raise AlreadyEnqueued(sk)
        return current

    def _gone(self, sk: str) -> NotFound:
        """Why the row ``sk`` could not be deleted: sent by direct delivery since it was read, or gone."""
        current = self._read(sk)
        return AlreadyEnqueued(sk) if current is not None and ATTR_DIRECT in current else self._missing(sk)

    def _write_unless_delivering(self, sk: str, ops: list[dict[str, Any]]) -> list[str]:
        """TransactWriteItems of ``ops`` (about the row ``sk``) and a check that no delivery of its
        partition's due second began (its fence, store.fence_second, is absent). Raises
        :class:`AlreadyDelivered` when one began (nothing written); returns [] when written, else the
        codes of ``ops`` that failed their conditions. Conflicts and throttling are retried."""
        pk = ops[0]["Delete"]["Key"]["pk"]["S"]
        check = {"ConditionCheck": {"TableName": self.table_name,
                                    "Key": row_key(META_PK, fence_key(pk, decode_sk(sk).due_ms)),
                                    "ConditionExpression": "attribute_not_exists(sk)"}}
        for attempt in itertools.count(1):
            try:
                self.ddb.transact_write_items(TransactItems=[*ops, check])
                return []
            except Exception as exc:
                codes = cancellation_codes(exc)
                if codes[-1:] == [CHECK_FAILED]:
                    raise AlreadyDelivered(sk) from exc
                if CHECK_FAILED in codes:
                    return codes[:-1]
                retry = is_retryable(exc) or "TransactionConflict" in codes or error_code(exc) in (
                    "TransactionConflictException", "TransactionInProgressException")
                wait = retry_wait_ms(attempt, self.clock) if retry else None
                if wait is None:
                    raise
                self.clock.sleep_ms(wait)
        raise PunctualError("transaction did not complete")  # pragma: no cover

    def redrive(self, queue_url: str, *, limit: int | None = None, codes: Collection[str] | None = None,
                wait_seconds: int = 1) -> RedriveReport:
        """Put the rows of the rejected-rows queue ``queue_url`` back as fresh rows.

        Each message's row, without Punctual's ``punctual_*`` bookkeeping and with its binary
        restored, is validated as the editor would, then written with ``PutItem`` on condition
        that no row has its key (a newer row wins), and only then is the message deleted. A
        message that cannot be redriven stays on the queue (visible again when the run ends) and
        is reported with why. ``limit``: at most this many messages read; ``codes``: only
        rejections with these reason codes (the others are left, ``why == "skipped"``);
        ``wait_seconds``: long polling of each receive (0 under a frozen clock).
        """
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        report = RedriveReport()
        held: dict[str, str] = {}  # message id -> receipt handle: what stays on the queue
        seen: set[str] = set()
        try:
            while limit is None or len(seen) < limit:
                messages = self._receive(queue_url, 10 if limit is None else min(10, limit - len(seen)),
                                         wait_seconds)
                new = [m for m in messages if m["MessageId"] not in seen]
                held.update({m["MessageId"]: m["ReceiptHandle"] for m in messages if m["MessageId"] in held})
                if not new:
                    return report
                for message in new:
                    seen.add(message["MessageId"])
                    held[message["MessageId"]] = message["ReceiptHandle"]
                    outcome = self._redrive_one(queue_url, message, codes)
                    if isinstance(outcome, RedriveLeft):
                        report.left.append(outcome)
                    else:
                        del held[message["MessageId"]]
                        report.redriven.append(outcome)
            return report
        finally:
            self._show_again(queue_url, list(held.values()))

    def _receive(self, queue_url: str, want: int, wait_seconds: int) -> list[dict[str, Any]]:
        resp = call_with_retry(lambda: self.sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=want, WaitTimeSeconds=wait_seconds,
            VisibilityTimeout=REDRIVE_VISIBILITY_S), self.clock)
        return list(resp.get("Messages", []))

    def _redrive_one(self, queue_url: str, message: dict[str, Any],
                     codes: Collection[str] | None) -> ScheduledTask | RedriveLeft:
        """Write one message's row back and delete the message, or say why it stays."""
        rejection = None
        try:
            rejection = parse_rejection(message["Body"])
            row = fresh_row(rejection, self.settings.partitions, self.table_name, codes)
        except NotRedrivable as exc:
            return RedriveLeft(message["MessageId"], rejection.sk if rejection else None,
                               rejection.code if rejection else None, exc.why, exc.detail)
        try:
            call_with_retry(lambda: self.ddb.put_item(
                TableName=self.table_name, Item=row, ConditionExpression="attribute_not_exists(sk)"), self.clock)
        except Exception as exc:
            if not is_conditional_failure(exc):
                raise
            return RedriveLeft(message["MessageId"], rejection.sk, rejection.code, EXISTS,
                               "a row with this key is in the table: the newer row wins")
        call_with_retry(lambda: self.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"]),
                        self.clock)
        return ScheduledTask.of(task_from_item(row, self.settings.partitions))

    def _show_again(self, queue_url: str, handles: list[str]) -> None:
        """Make the messages left on the queue visible again at once (best effort: they come
        back after REDRIVE_VISIBILITY_S anyway)."""
        for start in range(0, len(handles), 10):
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0}
                       for i, h in enumerate(handles[start : start + 10])]
            try:
                self.sqs.change_message_visibility_batch(QueueUrl=queue_url, Entries=entries)
            except Exception:  # noqa: BLE001, S112 - best effort, see the docstring
                continue

    # -- reads --------------------------------------------------------------
    def get(self, key: Any) -> ScheduledTask:
        """The pending task with this key (consistent read), or :class:`NotFound` /
        :class:`AlreadyDelivered`."""
        sk = task_key(key)
        item = self._read(sk)
        if item is None:
            raise self._missing(sk)
        return self._task(item, sk)

    def find(self, task_id: str) -> list[ScheduledTask]:
        """The pending tasks with this id, earliest first (an id is unique per due time only).

        Reads the id's whole partition (a query filtered on the server, so only matches come back):
        use the key when you have it. Rows that are not valid tasks are skipped, as in :meth:`list`.
        """
        suffix = "#" + task_id
        items = [
            item
            for pk in self._places(suffix)
            for page in self._pages(pk, FilterExpression="contains(sk, :id)",
                                    ExpressionAttributeValues={":id": {"S": suffix}}, ConsistentRead=True)
            for item in page.get("Items", [])
            if item["sk"]["S"].endswith(suffix)
        ]
        items.sort(key=item_sk)
        return [task for task in map(self._valid, items) if task is not None]

    def count(self, in_flight: bool = False) -> int:
        """How many rows the partitions hold (counted by DynamoDB, nothing is read back; rows
        awaiting rejection included), or with ``in_flight`` only those already pushed to the
        delay queue. Eventually consistent, like a dashboard figure."""
        filters = {"FilterExpression": "attribute_exists(#e)", "ExpressionAttributeNames": {"#e": ATTR_ENQUEUED_MS}}
        return sum(page.get("Count", 0) for pk in self.settings.partitions
                   for page in self._pages(pk, Select="COUNT", **(filters if in_flight else {})))

    def list(
        self, start: When | None = None, end: When | None = None, limit: int | None = None, page_size: int = 100
    ) -> Iterator[ScheduledTask]:
        """Pending tasks with ``start <= due < end``, earliest first, read page by page.

        Rows that are not valid tasks (awaiting rejection) are skipped. Tasks already
        pushed to the delay queue are included (``in_flight``) until delivered.
        """
        if limit is not None and limit <= 0:
            return iter(())
        lower = f"{_bound_ms(start):013d}" if start is not None else "0"
        upper = f"{_bound_ms(end):013d}" if end is not None else None
        return self._iter(lower, upper, limit, page_size)

    def _iter(self, lower: str, upper: str | None, limit: int | None, page_size: int) -> Iterator[ScheduledTask]:
        count = 0
        rows = across_partitions(
            lambda pk: query_from(self.ddb, self.settings, self.clock, lower, upper, page_size=page_size, pk=pk),
            self.settings.partitions)
        for item in rows:
            task = self._valid(item)
            if task is None:
                continue
            yield task
            count += 1
            if limit is not None and count >= limit:
                return

    # -- helpers ------------------------------------------------------------
    def _places(self, sk: str) -> tuple[str, ...]:
        """Where a task with this sk (or ``#<id>``) may be: its id's partition, then (sharded) the
        bare partition, which holds rows written before the table was sharded (core/shards.py)."""
        mine = self.settings.partition_for_key(sk)
        bare = self.partition_key_value
        return (mine,) if mine == bare else (mine, bare)

    def _read(self, sk: str) -> dict[str, Any] | None:
        for pk in self._places(sk):
            item = get_row(self.ddb, self.settings, self.clock, pk, sk)
            if item is not None:
                return item
        return None

    def _pages(self, pk: str, **kw: Any) -> Iterator[dict[str, Any]]:
        """Every page of a query on partition ``pk``; ``kw`` adds to the request (its values merge)."""
        values = {":p": {"S": pk}, **kw.pop("ExpressionAttributeValues", {})}
        request = {"TableName": self.table_name, "KeyConditionExpression": "pk = :p",
                   "ExpressionAttributeValues": values, **kw}
        while True:
            page = call_with_retry(lambda: self.ddb.query(**request), self.clock)
            yield page
            if not page.get("LastEvaluatedKey"):
                return
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _valid(self, item: dict[str, Any]) -> ScheduledTask | None:
        try:
            return ScheduledTask.of(task_from_item(item, self.settings.partitions))
        except RowRejected:
            return None

    def _missing(self, sk: str) -> NotFound:
        due_ms, now = decode_sk(sk).due_ms, self.clock.now_ms()
        if due_ms <= now:
            return AlreadyDelivered(sk)
        if self.settings.direct and due_ms <= now + self.settings.window_ms:
            return AlreadyEnqueued(sk)  # sent when it entered the window, then taken out
        return NotFound(sk)

    def _task(self, item: dict[str, Any], sk: str) -> ScheduledTask:
        try:
            return ScheduledTask.of(task_from_item(item, self.settings.partitions))
        except RowRejected as exc:
            raise PunctualError(f"row {sk!r} is not a valid task ({exc.code}: {exc.reason})") from exc
