"""The one retry policy for every AWS call: exponential backoff with *equal* jitter, sleeping
through the project clock, bounded by the invocation's deadline.

Equal jitter (a wait drawn in [ceiling / 2, ceiling], the ceiling doubling from ``BASE_MS`` up to
``CAP_MS``; AWS Architecture Blog, "Exponential Backoff And Jitter"), not full jitter ([0, ceiling],
botocore's standard mode): every retry of a throttled call really backs off by at least half its
step, while the random half still spreads the 16 send workers apart. It costs 0.75 x the ceiling on
average instead of 0.5 x; the benchmark's fault runs are seeded against this draw.

It is the only retry layer: the Lambda clients are built with botocore's retries off
(``runtime.make_clients``, ``total_max_attempts=1``), so a logical call makes at most ``attempts``
HTTP requests (it was up to 6 x 6 = 36, and 6 x 6 x 8 for a batch delete, against a 30 s
consumer). A retry whose wait would end within ``RESERVE_MS`` of the deadline is not made: the
error goes to the caller, which fails the record (Lambda retries it) instead of timing out
mid-call (docs/architecture.md, "One retry policy").
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from .clock import Clock
from .errors import is_retryable

T = TypeVar("T")

ATTEMPTS = 6  # HTTP requests per logical call, at most
BASE_MS = 50
CAP_MS = 2000
RESERVE_MS = 1000  # kept back at the end of an invocation: report, log, return

# The current invocation's deadline (clock ms), or None (no Lambda context: tests, the
# benchmark, the CLI). A context variable: parallel.pmap's workers inherit it, and the local
# stack's functions, each on its own thread, keep their own.
_deadline_ms: ContextVar[int | None] = ContextVar("punctual_retry_deadline_ms", default=None)


# The jitter's random source: the benchmark seeds it (seed_jitter) so that a run with injected
# faults, whose retries back off, is reproduced by its seed.
_jitter = random.Random()


def seed_jitter(seed: int) -> None:
    _jitter.seed(seed)


def set_deadline(deadline_ms: int | None) -> None:
    _deadline_ms.set(deadline_ms)


def deadline_of(context: Any, now_ms: int) -> int | None:
    """``now + context.get_remaining_time_in_millis()``, or None without a Lambda context."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    try:
        return now_ms + int(remaining())
    except (TypeError, ValueError):
        return None


def time_left_ms(clock: Clock) -> int | None:
    """ms until the invocation's deadline (None: no deadline)."""
    deadline = _deadline_ms.get()
    return None if deadline is None else deadline - clock.now_ms()


def backoff_ms(attempt: int, rng: random.Random | None = None) -> int:
    """Equal-jitter delay before retry ``attempt`` (1-based): uniform in [ceiling / 2, ceiling], the
    ceiling ``min(CAP_MS, BASE_MS * 2 ** (attempt - 1))``."""
    ceiling = min(CAP_MS, BASE_MS * 2 ** (attempt - 1))
    return int((rng or _jitter).uniform(ceiling / 2, ceiling))


def retry_wait_ms(attempt: int, clock: Clock, attempts: int = ATTEMPTS) -> int | None:
    """The wait before the request after ``attempt`` (1-based), or None when there is none:
    the attempts are spent, or the wait would end within ``RESERVE_MS`` of the deadline."""
    if attempt >= attempts:
        return None
    wait = backoff_ms(attempt)
    left = time_left_ms(clock)
    if left is not None and wait + RESERVE_MS > left:
        return None
    return wait


def call_with_retry(fn: Callable[[], T], clock: Clock, attempts: int = ATTEMPTS) -> T:
    """Call ``fn``; on a throttling/transient AWS error, back off and try again."""
    for attempt in itertools.count(1):
        try:
            return fn()
        except Exception as exc:
            wait = retry_wait_ms(attempt, clock, attempts) if is_retryable(exc) else None
            if wait is None:
                raise
            clock.sleep_ms(wait)
    raise AssertionError("unreachable")


def retry_unprocessed(call: Callable[[list[T]], list[T]], items: list[T], clock: Clock,
                      attempts: int = ATTEMPTS) -> list[T]:
    """For batch APIs that may leave part of a request unprocessed (BatchWriteItem):
    ``call(pending)`` returns what it left; a retryable error and a partial result each use one
    attempt of the same policy. Returns what is still left; the last error is raised."""
    pending = items
    for attempt in itertools.count(1):
        try:
            pending = call(pending)
        except Exception as exc:
            wait = retry_wait_ms(attempt, clock, attempts) if is_retryable(exc) else None
            if wait is None:
                raise
        else:
            if not pending:
                return []
            wait = retry_wait_ms(attempt, clock, attempts)
            if wait is None:
                return pending
        clock.sleep_ms(wait)
    raise AssertionError("unreachable")
