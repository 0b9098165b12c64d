"""One clock abstraction for the whole system.

Handlers read time only through a :class:`Clock`; tests and the simulator pass a
:class:`ManualClock` (or drive ``SystemClock`` with freezegun, which patches
``time.time``).
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def sleep_ms(self, ms: int) -> None: ...


class SystemClock:
    """Wall clock. ``now_ms`` goes through ``time.time`` so freezegun can move it."""

    def now_ms(self) -> int:
        return math.floor(time.time() * 1000)

    def sleep_ms(self, ms: int) -> None:
        if ms > 0:
            time.sleep(ms / 1000)


class ManualClock:
    """Virtual time: ``sleep_ms`` advances instantly."""

    def __init__(self, now_ms: int = 0):
        self._now = int(now_ms)
        self.slept_ms = 0

    def now_ms(self) -> int:
        return self._now

    def set(self, now_ms: int) -> None:
        self._now = int(now_ms)

    def advance_ms(self, ms: int) -> None:
        self._now += int(ms)

    def sleep_ms(self, ms: int) -> None:
        if ms > 0:
            self._now += int(ms)
            self.slept_ms += int(ms)


def sleep_until(clock: Clock, target_ms: int) -> None:
    """Sleep until ``clock.now_ms() >= target_ms`` (re-checks: sleeps may return early)."""
    for _ in range(1000):
        remaining = target_ms - clock.now_ms()
        if remaining <= 0:
            return
        clock.sleep_ms(remaining)


def iso_ms(epoch_ms: int) -> str:
    """``2026-12-02T13:18:51.123Z``: ISO-8601 UTC with milliseconds."""
    dt = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def to_epoch_ms(dt: datetime) -> int:
    """Aware datetime -> epoch ms; naive datetimes are refused (their zone is a guess)."""
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        raise ValueError("naive datetime: give a timezone-aware datetime (e.g. tzinfo=UTC)")
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000
