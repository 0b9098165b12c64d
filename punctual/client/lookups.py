"""Looking up and listing: a task by its key, the tasks of an id, a range of due times, a count."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from punctual.core.clock import to_epoch_ms
from punctual.core.keys import MAX_DUE_MS
from punctual.core.models import ATTR_ENQUEUED_MS
from punctual.core.store import across_partitions, item_sk, query_from
from punctual.errors import InvalidSchedule

from .table import TaskTable
from .tasks import ScheduledTask, When, task_key, to_due_ms


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


class Lookups(TaskTable):
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
