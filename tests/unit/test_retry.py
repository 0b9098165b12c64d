"""The one retry policy (punctual/core/retry.py): bounded attempts, bounded by the deadline, one layer."""

from __future__ import annotations

import pytest

from punctual.core import retry
from punctual.core.clock import ManualClock
from punctual.core.errors import is_retryable
from punctual.core.retry import ATTEMPTS, RESERVE_MS, call_with_retry, retry_unprocessed, set_deadline


class ClientError(Exception):
    def __init__(self, code: str, status: int = 400):
        super().__init__(code)
        self.response = {"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": status}}


def failing(code: str, calls: list[int], status: int = 400):
    def fn():
        calls.append(1)
        raise ClientError(code, status)
    return fn


def test_a_throttled_call_is_tried_attempts_times_then_raises():
    calls: list[int] = []
    clock = ManualClock(0)
    with pytest.raises(ClientError):
        call_with_retry(failing("ThrottlingException", calls), clock)
    assert len(calls) == ATTEMPTS
    assert clock.slept_ms > 0


def test_a_non_retryable_error_is_raised_at_once():
    calls: list[int] = []
    with pytest.raises(ClientError):
        call_with_retry(failing("ValidationException", calls), ManualClock(0))
    assert len(calls) == 1


def test_server_errors_and_botocore_standard_codes_are_retryable():
    """botocore's own retries are off (runtime.make_clients), so ours must cover what it did."""
    assert is_retryable(ClientError("Whatever", status=503))
    assert is_retryable(ClientError("TransactionInProgressException"))
    assert is_retryable(ClientError("TransactionConflictException"))  # the fence while a cancel checks it
    assert not is_retryable(ClientError("ConditionalCheckFailedException"))


def test_no_retry_wait_ends_past_the_deadline_less_the_reserve():
    """GIVEN 1.2 s left in the invocation WHEN a call keeps being throttled THEN it gives up before
    a wait would eat into the reserve, instead of retrying into the Lambda timeout."""
    clock = ManualClock(10_000)
    set_deadline(clock.now_ms() + RESERVE_MS + 200)
    calls: list[int] = []
    with pytest.raises(ClientError):
        call_with_retry(failing("ThrottlingException", calls), clock)
    assert 1 <= len(calls) < ATTEMPTS
    assert clock.now_ms() <= 10_000 + 200


def test_send_workers_see_the_invocations_deadline():
    from punctual.core.parallel import pmap

    clock = ManualClock(0)
    set_deadline(5_000)
    assert pmap(lambda _: retry.time_left_ms(clock), range(4), workers=4) == [5_000] * 4


def test_no_deadline_without_a_lambda_context():
    assert retry.deadline_of(None, 5) is None
    assert retry.deadline_of(type("C", (), {"get_remaining_time_in_millis": lambda self: 700})(), 5) == 705


def test_unprocessed_items_and_errors_share_one_budget_of_attempts():
    halves: list[list[int]] = []

    def half(pending: list[int]) -> list[int]:  # processes the first half of what it is given
        halves.append(pending)
        return pending[(len(pending) + 1) // 2:]
    assert retry_unprocessed(half, list(range(8)), ManualClock(0)) == []
    assert [len(p) for p in halves] == [8, 4, 2, 1]

    stuck: list[list[int]] = []

    def nothing(pending: list[int]) -> list[int]:
        stuck.append(pending)
        return pending
    assert retry_unprocessed(nothing, [1, 2], ManualClock(0)) == [1, 2]
    assert len(stuck) == ATTEMPTS

    seen: list[int] = []

    def throttled(pending: list[int]) -> list[int]:
        seen.append(1)
        raise ClientError("ProvisionedThroughputExceededException")
    with pytest.raises(ClientError):
        retry_unprocessed(throttled, [1], ManualClock(0))
    assert len(seen) == ATTEMPTS


def test_the_lambda_clients_do_not_retry_themselves():
    """One retry layer: botocore's would multiply ours (it was 6 x 6 HTTP requests per call)."""
    from punctual.core.runtime import make_clients

    clients = make_clients(region="us-east-1")
    assert {c.meta.config.retries["total_max_attempts"] for c in clients.values()} == {1}


class _Extremes:
    """A random source that draws the lowest, then the highest value of every range."""

    def __init__(self) -> None:
        self.n = 0

    def uniform(self, a: float, b: float) -> float:
        self.n += 1
        return a if self.n % 2 else b


def test_backoff_is_equal_jitter_half_to_all_of_a_doubling_ceiling_capped_at_two_seconds():
    """Equal jitter, as the module says: every wait is at least half its step (a throttled call
    really backs off) and at most the step; the step doubles from 50 ms and stops at 2 s."""
    rng = _Extremes()
    bounds = [(retry.backoff_ms(n, rng), retry.backoff_ms(n, rng)) for n in range(1, 8)]  # type: ignore[arg-type]
    assert bounds == [(25, 50), (50, 100), (100, 200), (200, 400), (400, 800), (800, 1600), (1000, 2000)]
