"""Cancelling and rescheduling: a transaction that stops a task's delivery unless it began
(docs/architecture.md, "Cancellation never lies")."""

from __future__ import annotations

import itertools
from typing import Any

from punctual.core.config import META_PK
from punctual.core.errors import error_code, is_retryable
from punctual.core.keys import decode_sk, fence_key
from punctual.core.models import ATTR_DIRECT, item_key
from punctual.core.retry import retry_wait_ms
from punctual.core.store import CHECK_FAILED, cancellation_codes, row_key
from punctual.errors import AlreadyDelivered, AlreadyEnqueued, AlreadyExists, NotFound, PunctualError

from .table import TaskTable
from .tasks import ScheduledTask, When, task_key


class Cancelling(TaskTable):
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
