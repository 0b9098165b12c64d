"""One-shot cron: format, never a started minute, round trip, year bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.core.cron import (
    MINUTE_MS,
    floor_minute,
    minute_not_after,
    minute_not_before,
    next_minute_after,
    one_shot_cron,
    parse_one_shot_cron,
)

T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z
LAST_MINUTE = 7_258_118_340_000  # 2199-12-31T23:59Z
times = st.integers(min_value=0, max_value=LAST_MINUTE - 2 * MINUTE_MS)


def test_format():
    assert one_shot_cron(T0) == "cron(0 0 1 1 ? 2027)"
    assert one_shot_cron(T0 + 13 * 3_600_000 + 7 * MINUTE_MS + 31 * 86_400_000) == "cron(7 13 1 2 ? 2027)"


def test_year_bounds():
    assert one_shot_cron(0) == "cron(0 0 1 1 ? 1970)"
    assert one_shot_cron(LAST_MINUTE) == "cron(59 23 31 12 ? 2199)"
    with pytest.raises(ValueError):
        one_shot_cron(LAST_MINUTE + MINUTE_MS)
    with pytest.raises(ValueError):
        one_shot_cron(-MINUTE_MS)


def test_refuses_a_time_inside_a_minute():
    with pytest.raises(ValueError):
        one_shot_cron(T0 + 1)


@pytest.mark.parametrize("expr", ["cron(0 0 1 1 ? *)", "rate(5 minutes)", "cron(0 0 1 1 MON 2027)", ""])
def test_parse_rejects_other_expressions(expr):
    with pytest.raises(ValueError):
        parse_one_shot_cron(expr)


def test_current_minute_is_never_armed():
    # at 00:00:00.000 exactly the minute 00:00 has begun: the next one is the earliest
    assert next_minute_after(T0) == T0 + MINUTE_MS
    assert minute_not_after(T0, T0) == T0 + MINUTE_MS
    assert minute_not_after(T0 - 5_000, T0) == T0 + MINUTE_MS  # target in the past
    assert minute_not_before(T0 + 59_999, T0 + 30_000) == T0 + MINUTE_MS


def test_not_after_and_not_before():
    now = T0 + 10_000
    target = T0 + 10 * MINUTE_MS + 30_000
    assert minute_not_after(target, now) == T0 + 10 * MINUTE_MS
    assert minute_not_before(target, now) == T0 + 11 * MINUTE_MS
    assert minute_not_before(T0 + 10 * MINUTE_MS, now) == T0 + 10 * MINUTE_MS


@settings(max_examples=500, deadline=None)
@given(now=times, offset=st.integers(min_value=-10**9, max_value=10**9))
def test_armed_minute_is_strictly_in_the_future(now, offset):
    target = max(0, now + offset)
    for minute in (minute_not_after(target, now), minute_not_before(target, now)):
        assert minute > now
        assert minute % MINUTE_MS == 0
    assert minute_not_after(target, now) <= max(target, next_minute_after(now))
    assert minute_not_before(target, now) >= target


@settings(max_examples=300, deadline=None)
@given(t=times)
def test_round_trip(t):
    minute = floor_minute(t)
    assert parse_one_shot_cron(one_shot_cron(minute)) == minute
