"""The benchmark runs the real handlers, whose self-measurement (docs/construct.md, "Self-measurement")
reads back the simulator's own models: what a deployment's metrics would give ``punctual calibrate``
(RunResult.self_measured keeps the values of the EMF records the handlers wrote)."""

from __future__ import annotations

from statistics import mean

from punctual.bench.models import Models
from punctual.bench.punctual_sim import PunctualSim, RunResult
from punctual.bench.scenarios import steady
from punctual.core.metrics_names import COLD_STARTS, PICKUP_MS, POLL_DELAY_MS, STREAM_LAG_MS


def run(*overrides: str) -> RunResult:
    """300 lone tasks over 2.4 hours (seed 3: tasks due from 1 s to hours ahead), the fake backend."""
    return PunctualSim(steady(3, n=300, days=0.1), Models().with_overrides(list(overrides)), seed=3,
                       backend="fake").run()


def cold_invocations(result: RunResult, fn: str) -> int:
    return sum(1 for inv in result.invocations if inv.fn == fn and inv.cold)


def test_each_measurement_is_exactly_what_the_simulator_drew():
    # GIVEN fixed models: SQS hands a visible message to the consumer 37 ms after it became visible, a
    # cold start takes 411 ms, a stream record reaches the editor 123 ms after its write, the rule's
    # target starts 250 ms into its minute
    result = run("sqs_poll_latency_ms=37,37", "cold_start_ms=411,411", "stream_latency_ms=123,123",
                 "rule_target_delay_ms=250,250", "rule_fire_spread_ms=1")
    got = result.self_measured
    # THEN every first pick-up of a warm consumer is 37 ms, and of a cold one 37 + 411 ms
    assert set(got[PICKUP_MS, False]) == {37} and set(got[PICKUP_MS, True]) == {448}
    assert len(got[PICKUP_MS, False]) + len(got[PICKUP_MS, True]) == 300  # each task's one message
    # and each cold start of the consumer is counted once, by the cold invocation itself
    assert got[COLD_STARTS, True] == [1] * cold_invocations(result, "consumer") and (COLD_STARTS, False) not in got
    assert cold_invocations(result, "consumer") >= 2
    # each poll's delay from its minute is the target's 250 ms (plus the cold start when cold)
    assert set(got[POLL_DELAY_MS, False]) == {250} and set(got[POLL_DELAY_MS, True]) == {661}
    assert len(got[POLL_DELAY_MS, False]) + len(got[POLL_DELAY_MS, True]) == result.counters["rule_fired"]
    # each record's lag is the stream's 123 ms plus how far into its second it was written (the
    # creation time is whole seconds), plus the cold start when cold
    assert all(0 <= lag - 123 <= 999 for lag in got[STREAM_LAG_MS, False])
    assert all(0 <= lag - 123 - 411 <= 999 for lag in got[STREAM_LAG_MS, True])
    assert len(got[STREAM_LAG_MS, False]) + len(got[STREAM_LAG_MS, True]) == 300  # each insert's record


def test_the_pick_up_distribution_matches_the_model_it_was_drawn_from():
    # GIVEN SQS's pick-up drawn uniformly in 20..200 ms and cold starts in 300..800 ms
    got = run("sqs_poll_latency_ms=20,200", "cold_start_ms=300,800").self_measured
    warm, cold = got[PICKUP_MS, False], got[PICKUP_MS, True]
    # THEN the warm pick-ups span the model's range with its mean (110 ms; the mean of ~300 uniform
    # draws is within 3 ms one time in three, within 15 ms barring a 5-sigma draw). A message may be
    # picked up sooner than its own draw, by a receive another message's draw scheduled (here one of
    # 297 took 18 ms), never later while the consumers are not all busy.
    assert 0 <= min(warm) < 40 and 180 < max(warm) <= 200
    assert sum(1 for value in warm if value < 20) <= 3
    assert abs(mean(warm) - 110) < 15
    # and the cold ones add a cold start
    assert all(320 <= value <= 1_000 for value in cold)
