"""Redriving: the rows of the rejected-rows queue put back as fresh rows (the decisions are
punctual.core.redrive's; here the queue's reads, the conditional puts and the deletes)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from punctual.core.errors import is_conditional_failure
from punctual.core.models import task_from_item
from punctual.core.redrive import EXISTS, SKIPPED, NotRedrivable, fresh_row, parse_rejection
from punctual.core.retry import call_with_retry

from .table import TaskTable
from .tasks import ScheduledTask

# A message redrive leaves on the queue stays hidden this long while the run goes on (so it is
# not read twice), and is made visible again when the run ends.
REDRIVE_VISIBILITY_S = 300


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


class Redriving(TaskTable):
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
