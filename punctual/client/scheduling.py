"""Scheduling: one task with a conditional PutItem, many with BatchWriteItem."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from punctual.core.errors import is_conditional_failure
from punctual.core.models import Task
from punctual.core.retry import call_with_retry, retry_unprocessed
from punctual.core.store import get_row
from punctual.errors import AlreadyExists, InvalidSchedule, PartialWrite

from .table import TaskTable
from .tasks import ScheduledTask, When

BATCH_WRITE = 25


class Scheduling(TaskTable):
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
