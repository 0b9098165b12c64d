"""Classification of DynamoDB stream records for the editor (pure).

Each record of the table's stream is one of:

- ``IGNORE``: nothing to do (REMOVE, the meta partition, a row already in flight,
  a released claim, an image-less record);
- ``REJECT``: the row itself is malformed (``rejection`` says why);
- ``SEND_NOW``: a valid row due within ``fast_path_seconds`` (or past due, or too soon for
  any poll to be armed for it): claim and send it at once, then make sure a poll follows its
  orphan check;
- ``ARM_LATER``: any other valid row: make sure a poll starts by ``due - lead``.

:func:`plan_stream_batch` folds a batch into the rows to send and the one minute to arm.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .config import META_PK, Settings
from .cron import ARM_MARGIN_MS, floor_minute, minute_not_after, minute_not_before, next_minute_after
from .latencies import stream_created_ms
from .models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS, RowRejected, Task, task_from_item
from .planning import RowState, row_state, undeliverable


class RecordAction(StrEnum):
    IGNORE = "ignore"
    REJECT = "reject"
    SEND_NOW = "send_now"
    ARM_LATER = "arm_later"


@dataclass(frozen=True)
class Classified:
    action: RecordAction
    sequence_number: str | None
    item: dict[str, Any] | None = None  # the NewImage (attribute values) when there is one
    task: Task | None = None
    rejection: RowRejected | None = None
    note: str = ""


def sequence_number(record: Any) -> str | None:
    if isinstance(record, Mapping):
        ddb = record.get("dynamodb")
        if isinstance(ddb, Mapping):
            seq = ddb.get("SequenceNumber")
            return str(seq) if seq is not None else None
    return None


def _pk_of(image: Any) -> str | None:
    if isinstance(image, Mapping):
        pk = image.get("pk")
        if isinstance(pk, Mapping) and isinstance(pk.get("S"), str):
            return pk["S"]
    return None


def classify_record(record: Any, s: Settings, now_ms: int) -> Classified:
    """Decide what the editor does with one stream record. Never raises for a bad row."""
    seq = sequence_number(record)
    if not isinstance(record, Mapping) or not isinstance(record.get("dynamodb"), Mapping):
        return Classified(RecordAction.IGNORE, seq, note="not a DynamoDB stream record")
    name = record.get("eventName")
    data = record["dynamodb"]
    if name == "REMOVE":
        return Classified(RecordAction.IGNORE, seq, note="remove")
    if name not in ("INSERT", "MODIFY"):
        return Classified(RecordAction.IGNORE, seq, note=f"unknown event {name!r}")
    new = data.get("NewImage")
    if META_PK in (_pk_of(data.get("Keys")), _pk_of(new)):
        return Classified(RecordAction.IGNORE, seq, note="meta partition")
    if not isinstance(new, Mapping):
        # KEYS_ONLY / OLD_IMAGE streams: the poller still finds the row, just later.
        return Classified(RecordAction.IGNORE, seq, note="no NewImage (stream view must include new images)")
    item = dict(new)
    if name == "MODIFY":
        old = data.get("OldImage")
        if ATTR_ENQUEUED_MS in item:
            return Classified(RecordAction.IGNORE, seq, item, note="in flight")
        if isinstance(old, Mapping) and ATTR_ENQUEUED_MS in old and ATTR_ATTEMPT in item:
            # A claim released after a failed send (store.release keeps the attempt count):
            # whoever released it made sure a poll comes for it. A put over an in-flight row
            # (no bookkeeping) is a new task: classified below like an insert.
            return Classified(RecordAction.IGNORE, seq, item, note="claim released")
    task, rejection = check_row(item, s, now_ms)
    if rejection is not None:
        return Classified(RecordAction.REJECT, seq, item, task=task, rejection=rejection)
    assert task is not None
    if task.due_ms <= now_ms + s.fast_path_ms or not poll_can_take(task.due_ms, now_ms, s.lead_ms):
        return Classified(RecordAction.SEND_NOW, seq, item, task=written_late(task, stream_created_ms(record)))
    return Classified(RecordAction.ARM_LATER, seq, item, task=task)


def written_late(task: Task, created_ms: int | None) -> Task:
    """``task`` noting when it was written (``written_ms``, which its claim stores) if that was after
    its due time: its lateness then counts from the write, not from a due time Punctual never had the
    row for (Task.ready_ms). ``created_ms``: its stream record's creation, rounded down to the second
    (latencies.stream_created_ms), so the lateness counted is up to 999 ms more, never less."""
    if created_ms is None or created_ms <= task.due_ms:
        return task
    return task.model_copy(update={"written_ms": created_ms})


def check_row(item: dict[str, Any], s: Settings, now_ms: int) -> tuple[Task | None, RowRejected | None]:
    """The row as a task, or why it is rejected: malformed (``task_from_item``), or its sends used
    up (the poller's rule, applied by the editor too: planning.row_state)."""
    try:
        task = task_from_item(item, s.partitions, s.event_format)
    except RowRejected as exc:
        return None, exc
    except Exception as exc:  # a row we cannot even parse is still the row's problem
        return None, RowRejected("malformed", str(exc)[:200])
    if row_state(task, now_ms, s.orphan_grace_ms, s.max_attempts) is RowState.EXHAUSTED:
        return task, undeliverable(task)
    return task, None


def poll_can_take(due_ms: int, now_ms: int, lead_ms: int) -> bool:
    """Can a poll that starts by ``due - lead`` still be armed? The earliest minute safe to arm
    begins after ``now + ARM_MARGIN_MS``; a poll armed for a minute starts within it, which
    ``lead`` covers."""
    return floor_minute(due_ms - lead_ms) >= next_minute_after(now_ms + ARM_MARGIN_MS)


def send_arm_minute(task: Task, s: Settings, now_ms: int) -> int:
    """A poll after the orphan check of a row sent now (finds it if its message is lost)."""
    return minute_not_before(max(task.due_ms, now_ms) + s.orphan_grace_ms, now_ms)


def later_arm_minute(task: Task, s: Settings, now_ms: int) -> int:
    """The latest minute a poll can start and still send a row due after the window."""
    return minute_not_after(task.due_ms - s.lead_ms, now_ms)


@dataclass
class StreamPlan:
    records: list[Classified] = field(default_factory=list)
    arm_minute_ms: int | None = None

    def of(self, action: RecordAction) -> list[Classified]:
        return [c for c in self.records if c.action is action]

    @property
    def send_now(self) -> list[Task]:
        tasks = [c.task for c in self.of(RecordAction.SEND_NOW) if c.task is not None]
        return sorted({t.sk: t for t in tasks}.values(), key=lambda t: t.sk)

    @property
    def arming_records(self) -> list[Classified]:
        """Records whose rows rely on the arm (retry them if arming fails)."""
        return [c for c in self.records if c.action in (RecordAction.SEND_NOW, RecordAction.ARM_LATER)]


def plan_stream_batch(records: Iterable[Any], s: Settings, now_ms: int) -> StreamPlan:
    """Classify a batch and pick the one minute to arm: the earliest any of its rows needs."""
    plan = StreamPlan(records=[classify_record(r, s, now_ms) for r in records])
    minutes = []
    for c in plan.records:
        if c.task is None:
            continue
        if c.action is RecordAction.SEND_NOW:
            minutes.append(send_arm_minute(c.task, s, now_ms))
        elif c.action is RecordAction.ARM_LATER:
            minutes.append(later_arm_minute(c.task, s, now_ms))
    plan.arm_minute_ms = min(minutes) if minutes else None
    return plan
