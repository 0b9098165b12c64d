"""`punctual probe`'s pure part (punctual/probe.py): the plan, its requests and price, each sample's
offsets, the distribution per delay, and whether direct delivery's margin covers the early tail."""

from __future__ import annotations

import pytest

from punctual.bench.prices import SQS_REQUEST
from punctual.probe import (
    DEFAULT_DELAYS,
    Distribution,
    ProbePlan,
    ProbeRun,
    Sample,
    by_delay,
    distribution,
    margin_verdict,
    pickup_ms,
    plan_lines,
    report,
    summary_lines,
)
from punctual.stats import percentile


def test_percentile_is_nearest_rank():
    """The smallest value with at least p % at or below it. Mutant: the banker's rounding it replaced
    (p1 of 1..100 was 2, p99 was 100)."""
    hundred = list(range(100, 0, -1))  # unsorted on purpose
    assert [percentile(hundred, p) for p in (0, 1, 7, 50, 99, 100)] == [1, 1, 7, 50, 99, 100]
    assert percentile([5], 99) == 5
    assert percentile([], 50) is None


def test_the_plan_sends_round_by_round_the_longest_delay_first_spaced_out():
    plan = ProbePlan(delays=(0, 5, 1), samples=2, spacing_ms=137)
    assert plan.sends() == [(0, 5), (137, 1), (274, 0), (411, 5), (548, 1), (685, 0)]
    # the last 5-second message is sent at 411 ms: its delay ends at 5,411 ms; 30 s more for a late one
    assert plan.duration_ms() == 5_411 + 30_000


def test_the_plan_counts_its_requests_and_their_price():
    """Receives: one a cycle (the longer of the wait and the interval) over the duration, plus one a
    message (a receive returning a message returns early). Mutant: the wait not counted (interval
    alone: 709 receives)."""
    plan = ProbePlan(delays=(0, 1), samples=3, wait_s=1, interval_ms=50, spacing_ms=100, timeout_s=4)
    # sends at 0 (1 s), 100 (0), 200 (1), ..., 500 (0): the last delay ends at 400 + 1,000
    assert plan.duration_ms() == 1_400 + 4_000
    assert plan.requests() == {"CreateQueue": 1, "SendMessage": 6, "ReceiveMessage": 6 + 6, "DeleteQueue": 1}
    assert plan.price_usd() == pytest.approx(20 * 0.40 / 1e6)
    assert SQS_REQUEST == 0.40 / 1e6
    short = ProbePlan(delays=(0, 1), samples=3, wait_s=0, interval_ms=50, spacing_ms=100, timeout_s=4)
    assert short.requests()["ReceiveMessage"] == 5_400 // 50 + 6


def test_the_default_plan_and_its_printed_cost():
    plan = ProbePlan()
    assert plan.delays == DEFAULT_DELAYS == (0, 1, 2, 5, 15, 60, 300, 900)
    # 40 messages; the last 900-s one is the 33rd sent (5th round), at 32 x 137 ms
    assert plan.duration_ms() == 32 * 137 + 900_000 + 30_000
    req = plan.requests()
    assert req == {"CreateQueue": 1, "SendMessage": 40, "ReceiveMessage": -(-934_384 // 1000) + 40, "DeleteQueue": 1}
    lines = plan_lines(plan, "AWS, eu-west-1", "punctual-probe-0a1b2c3d")
    assert "punctual-probe-0a1b2c3d (AWS, eu-west-1)" in lines[0]
    assert "40 messages" in lines[1]
    assert "at most 1,017 requests (CreateQueue 1, SendMessage 40, ReceiveMessage 975, DeleteQueue 1): $0.0004" in lines[2]
    assert "15 min 35 s" in lines[3]


@pytest.mark.parametrize("kw", [{"delays": ()}, {"delays": (901,)}, {"delays": (-1,)}, {"samples": 0},
                                {"wait_s": 21}, {"wait_s": 0, "interval_ms": 0}])
def test_a_plan_out_of_range_is_refused(kw):
    with pytest.raises(ValueError):
        ProbePlan(**kw)


def test_a_samples_two_measures_and_the_clock_offset():
    """server: SQS's first receive against its SentTimestamp + delay; client: the local return of the
    receive against the local clock before the send + delay; the offset: SentTimestamp against the
    middle of the send call."""
    s = Sample(delay_s=2, send_start_ms=10_000, send_end_ms=10_040, sent_ms=10_030, first_receive_ms=12_010,
               received_ms=12_080)
    assert (s.server_ms, s.client_ms, s.clock_offset_ms) == (-20, 80, 10)
    assert Sample(delay_s=2, send_start_ms=10_000).server_ms is None
    assert s.to_json()["server_ms"] == -20


def test_a_distribution_pins_every_figure():
    values: list[int | None] = [-30, 5, *range(10, 108), None]  # 100 received, one missing
    d = distribution(values)
    assert d == Distribution(count=100, missing=1, min=-30, p1=-30, p50=57, p99=106, max=107, early=1,
                             worst_early_ms=30)
    assert distribution([None, None]) == Distribution(count=0, missing=2)
    assert distribution([0, 3]).early == 0  # on the dot is not early


def _samples(delay: int, servers: list[int]) -> list[Sample]:
    return [Sample(delay, send_start_ms=0, send_end_ms=0, sent_ms=0, first_receive_ms=delay * 1000 + v,
                   received_ms=delay * 1000 + v) for v in servers]


def test_by_delay_and_the_pickup_resolution():
    samples = _samples(0, [10, 20, 40]) + _samples(5, [-3, 7])
    grouped = by_delay(samples)
    assert list(grouped) == [0, 5]
    assert grouped[5]["server"].worst_early_ms == 3 and grouped[5]["client"].count == 2
    assert pickup_ms(samples) == 40  # p99 of the DelaySeconds-0 samples
    assert pickup_ms(_samples(5, [1])) is None


def test_the_margin_covers_the_early_tail_exactly_at_its_bound():
    """The bound: the most any timed sample (DelaySeconds >= 1) may have been visible before its delay
    ended: the loop's pick-up p99 (40 ms) minus its first receive's offset; the worst here is 40 - (-25)
    = 65 ms. A margin of 65 ms covers it, 64 does not. The DelaySeconds-0 samples only give the
    resolution (their own offsets are no timer's). Mutants: the resolution left out (bound 25), the
    DelaySeconds-0 samples counted as timed (bound 40 - 10 = 30, lower here, but a 0-s sample at -50
    would be 90)."""
    samples = _samples(0, [10, 20, 40, -50]) + _samples(1, [30, -25]) + _samples(900, [100])
    assert pickup_ms(samples) == 40
    at = margin_verdict(65, samples)
    assert (at.worst_early_ms, at.bound_ms, at.pickup_ms, at.measured, at.covers) == (25, 65, 40, 3, True)
    assert not margin_verdict(64, samples).covers
    assert "(64 ms) does NOT cover" in margin_verdict(64, samples).line()
    assert "(65 ms) covers" in at.line() and "up to 65 ms" in at.line()


def test_without_delay_zero_the_bound_is_the_worst_early_receive_and_nothing_measured_covers_nothing():
    samples = _samples(2, [5, -12])
    v = margin_verdict(12, samples)
    assert (v.bound_ms, v.pickup_ms, v.covers) == (12, None, True)
    assert "resolution unknown" in v.line()
    assert not margin_verdict(1000, _samples(0, [5])).covers  # no timed sample: nothing to judge
    assert "nothing measured" in margin_verdict(1000, []).line()


def test_the_report_and_the_summary_carry_the_distribution_and_the_verdict():
    run = ProbeRun(ProbePlan(delays=(0, 1), samples=2), "http://127.0.0.1:1", "us-east-1", "punctual-probe-x",
                   samples=_samples(0, [10, 30]) + _samples(1, [45, 60]), receive_cycle_ms=[50, 52, 70])
    rep = report(run, 1000)
    assert rep["format"] == "punctual-probe/1" and rep["decides"] == "server"
    assert rep["by_delay"]["1"]["server"] == {"count": 2, "missing": 0, "min": 45, "p1": 45, "p50": 45, "p99": 60,
                                             "max": 60, "early": 0, "worst_early_ms": 0}
    assert rep["resolution"] == {"pickup_p99_ms": 30, "receive_cycle_p50_ms": 52, "receive_cycle_max_ms": 70,
                                 "receive_errors": 0}
    assert rep["margin"]["covers"] is True and rep["margin"]["bound_ms"] == 0
    assert len(rep["samples"]) == 4 and rep["plan"]["requests"]["SendMessage"] == 4
    lines = summary_lines(run, 1000)
    assert "| 1 | 2 | 0 | 45 | 45 | 45 | 60 | 60 | 0 | 0 | 45 / 60 |" in lines
    assert lines[-1].startswith("direct delivery's early margin (1000 ms) covers")
