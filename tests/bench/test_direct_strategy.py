"""``punctual-direct``: Punctual's direct delivery mode as a strategy of the benchmark. Its deliveries
are messages sent to the delivery queue with DelaySeconds, delivered when SQS makes them visible; it
deploys no delay queue and no consumer, so it runs and bills neither."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from punctual.bench import run as bench_run
from punctual.bench.billing import IDLE_RECEIVE_API
from punctual.bench.models import Models
from punctual.bench.punctual_sim import EPOCH_MS, PunctualSim, RunResult
from punctual.bench.report import summarize
from punctual.bench.run import run_scenario
from punctual.bench.scenarios import Scenario

from .sim_support import bare_sim

SK = "1798761660000#t0000000"  # the bare simulator's one task (index 0)


def _send_to_delivery_queue(models: Models, *entries: dict) -> list[int]:
    """GIVEN a simulator at its start (EPOCH_MS), WHEN a handler's client sends ``entries`` (extra
    fields of each SendMessageBatch entry) to the delivery queue, THEN: the delivery times of its task
    (ms from the start)."""
    sim = bare_sim(models)
    sim.sk_index[SK] = 0
    assert sim.engine.now == EPOCH_MS
    body = json.dumps({"key": SK, "id": "t0000000"})
    for start in range(0, len(entries), 10):  # at most 10 entries a batch, as SQS takes them
        sim.h_sqs.send_message_batch(QueueUrl=sim.settings.delivery_queue_url, Entries=[
            {"Id": str(k), "MessageBody": body, **extra} for k, extra in enumerate(entries[start:start + 10])])
    return sim.result.deliveries[0]


def test_a_message_sent_with_delay_seconds_is_delivered_when_sqs_makes_it_visible():
    assert _send_to_delivery_queue(Models(), {"DelaySeconds": 3}) == [3_000]
    assert _send_to_delivery_queue(Models(), {"DelaySeconds": 900}) == [900_000]


def test_a_message_sent_without_delay_is_delivered_when_sent():
    """The consumer's sends (at the due ms, no DelaySeconds): the figure the benchmark always took."""
    assert _send_to_delivery_queue(Models(), {}, {"DelaySeconds": 0}) == [0, 0]


def test_under_the_early_reading_sqs_may_show_it_up_to_the_bound_before_but_never_before_the_send():
    early = replace(Models(), sqs_early_max_ms=1_000)
    times = _send_to_delivery_queue(early, *({"DelaySeconds": 3} for _ in range(200)))
    assert all(2_000 <= t <= 3_000 for t in times)
    assert len(set(times)) > 50  # drawn per message, not one shift for all
    assert min(times) < 2_200
    wide = replace(Models(), sqs_early_max_ms=5_000)
    assert min(_send_to_delivery_queue(wide, *({"DelaySeconds": 1} for _ in range(50)))) == 0
    assert _send_to_delivery_queue(early, {}) == [0]  # no delay: visible when sent, whatever the reading


def test_punctual_direct_is_a_strategy_run_by_default_after_punctual():
    assert bench_run.STRATEGIES == ("punctual", "punctual-direct", "cdk-scheduler", "eventbridge-scheduler")
    assert "punctual-direct" in bench_run.SCENARIO_STRATEGIES["firehose"]  # real handlers: the limits apply


def test_the_cli_runs_it_by_default_and_reports_it_beside_punctual(tmp_path, monkeypatch):
    seen: list[tuple[str, ...]] = []

    def fake_run_scenario(name, seed, quick, models, strategies, tasks=None, backend="moto", settings=None, rate=None):
        seen.append(tuple(strategies))
        return [RunResult(s, name, 1, 120_000, {0: [60_000]}, [60_000], [0]) for s in strategies]

    monkeypatch.setattr(bench_run, "run_scenario", fake_run_scenario)
    p = argparse.ArgumentParser()
    bench_run.add_arguments(p)
    assert bench_run.main(p.parse_args(["--quick", "--scenario", "idle", "--no-plots", "--out", str(tmp_path),
                                        "--json", str(tmp_path / "s.json")])) == 0
    assert seen == [bench_run.STRATEGIES]
    rows = [line.split(" | ")[1] for line in (tmp_path / "results-idle.md").read_text().splitlines()
            if line.startswith("| idle |")]
    assert rows[:4] == ["punctual", "punctual-direct", "cdk-scheduler", "eventbridge-scheduler"]
    assert "punctual-direct" in json.loads((tmp_path / "s.json").read_text())["strategies"]
    assert p.parse_args(["--strategy", "punctual-direct"]).strategy == ["punctual-direct"]


@pytest.fixture(scope="module")
def idle_week():
    """Quick idle, both Punctual strategies: 3 tasks over 7 days (fake backend, seed 1)."""
    return {r.strategy: r for r in run_scenario("idle", seed=1, quick=True, models=Models(),
                                                 strategies=("punctual", "punctual-direct"), backend="fake")}


def test_direct_runs_no_consumer_and_bills_no_idle_receives(idle_week):
    direct, default = idle_week["punctual-direct"], idle_week["punctual"]
    s = summarize(direct)
    assert s.delivered == s.n == 3 and s.lost == 0 and s.early == 0
    assert {inv.fn for inv in direct.invocations} <= {"poller", "editor"}
    assert not any(actor == "lambda-sqs-poller" for actor, _ in direct.requests)  # no event source at all
    assert IDLE_RECEIVE_API not in s.by_api and s.cost_parts["(SQS: idle receives)"] == 0
    assert "(Lambda consumer)" not in s.cost_parts
    # the default strategy still deploys them: its week of idle long polls is in its cost
    assert summarize(default).by_api[IDLE_RECEIVE_API] > 0 and summarize(default).cost_parts["(SQS: idle receives)"] > 1


def test_direct_sends_each_task_to_the_delivery_queue_and_nothing_to_the_delay_queue():
    """Quick steady (on-time SQS, fake backend): every task delivered once, never early; the handlers'
    sends all go to the delivery queue, with DelaySeconds."""
    (r,) = run_scenario("steady", seed=1, quick=True, models=Models(), strategies=("punctual-direct",),
                        backend="fake")
    s = summarize(r)
    assert s.delivered == s.n and s.lost == 0 and s.early == 0 and s.duplicates == 0
    assert s.max is not None and s.max < 2_000, s.max  # whole seconds of delay, phase-aligned after due
    assert r.counters["direct_delay_queue_sends"] == 0
    assert {inv.fn for inv in r.invocations} <= {"poller", "editor"}


@pytest.mark.parametrize("delivery", ["consumer", "direct"])
def test_in_direct_mode_nothing_reaches_a_consumer(delivery):
    """GIVEN a poller invocation whose retries all failed, and a message sent to the delay queue's URL
    (none in direct mode), WHEN the simulator runs on, THEN a consumer runs in the default mode only:
    direct delivery deploys no delay queue (the poller's OnFailure destination) and no consumer."""
    sim = PunctualSim(Scenario("t", "", [0], [60_000], 120_000), Models(), seed=1, backend="fake",
                      settings={"delivery": delivery})
    sim._setup_fake()
    sim.frozen = SimpleNamespace(move_to=lambda _: None)
    sim._poll_failed({"id": "rule-event-1"}, attempt=len(sim.rule.retry_delays_ms), error=RuntimeError("boom"))
    sim.h_sqs.send_message(QueueUrl=sim.settings.delay_queue_url, MessageBody="{}")
    sim.engine.run(sim.engine.now + 60_000)

    consumers = [inv for inv in sim.result.invocations if inv.fn == "consumer"]
    assert sim.result.counters["failure_notices"] == 1
    if delivery == "consumer":
        assert consumers and sim.result.requests[("lambda-destination", "sqs.SendMessage")] == 1
    else:
        assert not consumers and ("lambda-destination", "sqs.SendMessage") not in sim.result.requests
        assert sim.settings.delay_queue_url == ""  # as deployed: no delay queue
        assert sim.result.counters["direct_delay_queue_sends"] == 1  # shown in the counters, never received
