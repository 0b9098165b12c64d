"""One-shot EventBridge cron expressions, always UTC and minute-granular.

EventBridge fires a cron rule somewhere within the minute (not at :00) and a
target may start seconds later; a cron for a minute that has begun may never
fire. So every function here returns a minute that starts strictly after ``now``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

MINUTE_MS = 60_000
MIN_YEAR, MAX_YEAR = 1970, 2199

_CRON = re.compile(r"^cron\((\d{1,2}) (\d{1,2}) (\d{1,2}) (\d{1,2}) \? (\d{4})\)$")


# The minute we arm must not begin before PutRule lands (a one-shot cron for a started minute may
# never fire): plan as if "now" were this much later.
ARM_MARGIN_MS = 10_000


def floor_minute(ms: int) -> int:
    return ms - ms % MINUTE_MS


def next_minute_after(now_ms: int) -> int:
    """Start of the first minute that has not begun at ``now_ms``."""
    return floor_minute(now_ms) + MINUTE_MS


def minute_not_after(target_ms: int, now_ms: int) -> int:
    """Latest future minute whose start is <= ``target_ms`` (a poll that must come before a time).

    Never a started minute: when ``target_ms`` is in the current minute or the
    past, the next minute is returned (the earliest we can still arm).
    """
    return max(floor_minute(target_ms), next_minute_after(now_ms))


def minute_not_before(target_ms: int, now_ms: int) -> int:
    """Earliest future minute whose start is >= ``target_ms`` (a poll that must come after a time)."""
    start = floor_minute(target_ms)
    if start < target_ms:
        start += MINUTE_MS
    return max(start, next_minute_after(now_ms))


def one_shot_cron(minute_ms: int) -> str:
    """``cron(M H D Mon ? YYYY)`` for the UTC minute starting at ``minute_ms``."""
    if minute_ms % MINUTE_MS:
        raise ValueError(f"{minute_ms} is not the start of a minute")
    dt = datetime.fromtimestamp(minute_ms / 1000, tz=UTC)
    if not MIN_YEAR <= dt.year <= MAX_YEAR:
        raise ValueError(f"year {dt.year} outside EventBridge's {MIN_YEAR}-{MAX_YEAR}")
    return f"cron({dt.minute} {dt.hour} {dt.day} {dt.month} ? {dt.year})"


def parse_one_shot_cron(expr: str) -> int:
    """Inverse of :func:`one_shot_cron`: the minute's start in epoch ms."""
    m = _CRON.match(expr.strip())
    if not m:
        raise ValueError(f"not a one-shot cron expression: {expr!r}")
    minute, hour, day, month, year = (int(g) for g in m.groups())
    dt = datetime(year, month, day, hour, minute, tzinfo=UTC)
    return int(dt.timestamp()) * 1000
