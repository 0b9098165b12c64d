"""Exponential backoff with full jitter, sleeping through the project clock."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

from .clock import Clock
from .errors import is_retryable

T = TypeVar("T")

BASE_MS = 50
CAP_MS = 2000


def backoff_ms(attempt: int, rng: random.Random | None = None) -> int:
    """Full-jitter delay before retry ``attempt`` (1-based)."""
    ceiling = min(CAP_MS, BASE_MS * 2 ** (attempt - 1))
    return int((rng or random).uniform(ceiling / 2, ceiling))


def call_with_retry(fn: Callable[[], T], clock: Clock, attempts: int = 6) -> T:
    """Call ``fn``; on a throttling/transient AWS error, back off and try again."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not is_retryable(exc):
                raise
            clock.sleep_ms(backoff_ms(attempt))
    raise AssertionError("unreachable")
