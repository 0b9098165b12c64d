"""Parsing of the CLI's ``--in`` and ``--at`` values (pure functions).

``--in`` takes a duration: ``30s``, ``5m``, ``1h30m``, ``2d``, ``250ms``, ``1.5s``
(a bare number is seconds). ``--at`` takes an ISO-8601 time with a zone
(``2026-12-24T18:00:00Z``, ``2026-12-24T19:00:00.250+01:00``) or epoch ms (13 digits).
Naive times are refused: their zone would be a guess.
"""

from __future__ import annotations

import re
from datetime import datetime

from punctual.core.clock import to_epoch_ms
from punctual.core.keys import MAX_DUE_MS

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


class TimeSpecError(ValueError):
    """A time the user gave that we cannot use (the message is shown as is)."""


def parse_duration_ms(text: str) -> int:
    """``"1h30m"`` -> 5_400_000. Non-negative; at least one unit; no garbage."""
    raw = (text or "").strip().lower().replace(" ", "")
    if not raw:
        raise TimeSpecError("empty duration: use e.g. 30s, 5m, 1h30m, 2d, 250ms")
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        return round(float(raw) * 1000)
    pos, total = 0, 0.0
    for match in _PART.finditer(raw):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS_MS[match.group(2)]
        pos = match.end()
    if pos != len(raw) or pos == 0:
        raise TimeSpecError(f"bad duration {text!r}: use e.g. 30s, 5m, 1h30m, 2d, 250ms")
    return round(total)


def parse_at_ms(text: str) -> int:
    """ISO-8601 with a zone, or 13-digit epoch ms -> epoch ms."""
    raw = (text or "").strip()
    if not raw:
        raise TimeSpecError("empty time: use e.g. 2026-12-24T18:00:00Z")
    if re.fullmatch(r"\d+", raw):
        if len(raw) != 13:
            raise TimeSpecError(f"bad time {text!r}: epoch times must be 13-digit milliseconds")
        return int(raw)
    iso = raw[:-1] + "+00:00" if raw[-1:] in ("Z", "z") else raw
    try:
        dt = datetime.fromisoformat(iso)
    except ValueError:
        raise TimeSpecError(f"bad time {text!r}: use ISO-8601 like 2026-12-24T18:00:00Z") from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise TimeSpecError(f"time {text!r} has no zone: add Z (UTC) or an offset like +01:00")
    return to_epoch_ms(dt)


def resolve_due_ms(in_: str | None, at: str | None, now_ms: int) -> int:
    """Exactly one of ``--in``/``--at`` -> due epoch ms, checked against the row format's range."""
    if (in_ is None) == (at is None):
        raise TimeSpecError("give exactly one of --in DURATION or --at TIME")
    due = now_ms + parse_duration_ms(in_) if in_ is not None else parse_at_ms(at or "")
    if due < 0:
        raise TimeSpecError("time is before 1970")
    if due >= MAX_DUE_MS:
        raise TimeSpecError("time is after 2199-12-31T23:59:59.999Z (the scheduler's limit)")
    return due
