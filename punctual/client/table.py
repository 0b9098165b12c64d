"""What every part of the client stands on: the instance's settings and partition rules, its AWS
clients, and building and reading a task's row. The parts (scheduling.py, lookups.py,
cancelling.py, redriving.py) each add what a user does; :class:`~punctual.client.PunctualClient`
is all of them.

One place for each rule the parts share, and where what comes next goes:
- which partitions a task may be in (:meth:`TaskTable._places`) and reading its row
  (:meth:`TaskTable._read`): a read by id (unique ids) joins them here, and the by-id get, cancel
  and reschedule resolve through it;
- which error names a row that is gone (:meth:`TaskTable._missing`): the one reader of the
  delivery mode and window, so a mode learned from the instance replaces the constructor's there;
- the AWS clients, each made on first use (:func:`_made`): a command that needs only some of
  them makes only those.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from punctual.core.clock import Clock, SystemClock
from punctual.core.config import Settings
from punctual.core.ddbjson import UnsupportedValue, from_plain
from punctual.core.keys import InvalidKey, decode_sk, encode_sk, validate_id
from punctual.core.models import RowRejected, Task, task_from_item
from punctual.core.retry import call_with_retry
from punctual.core.store import get_row
from punctual.errors import AlreadyDelivered, AlreadyEnqueued, InvalidSchedule, NotFound, PunctualError

from .tasks import ScheduledTask, When, to_due_ms


def _made(service: str) -> Any:
    """A boto3 client for ``service`` with the environment's configuration (boto3 is imported on
    first use: the Lambda functions never load the client)."""
    import boto3

    return boto3.client(service)


class TaskTable:
    """A Punctual instance's table as the client sees it. See :class:`~punctual.client.PunctualClient`
    for the constructor's arguments."""

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
            self._ddb = _made("dynamodb")
        return self._ddb

    @property
    def sqs(self) -> Any:
        """The SQS client :meth:`redrive` reads the rejected-rows queue with."""
        if self._sqs is None:
            self._sqs = _made("sqs")
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

    # -- reading rows -------------------------------------------------------
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
