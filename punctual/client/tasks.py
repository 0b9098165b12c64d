"""What a user gives the client and gets back: due times, task handles, :class:`ScheduledTask`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from punctual.core.clock import iso_ms, to_epoch_ms
from punctual.core.keys import MAX_DUE_MS, InvalidKey, decode_sk
from punctual.core.models import Task
from punctual.errors import InvalidSchedule

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


def task_key(key_or_task: Any) -> str:
    """The sk of a task handle (a key string or a :class:`ScheduledTask`), validated."""
    key = key_or_task.key if isinstance(key_or_task, ScheduledTask) else key_or_task
    try:
        decode_sk(key)
    except InvalidKey as exc:
        raise InvalidSchedule(f"not a task key: {exc.reason}", exc.code) from exc
    return key
