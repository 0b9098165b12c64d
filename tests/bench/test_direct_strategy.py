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
    """Quick idle: 3 tasks over 7 days (fake backend, seed 1), Punctual's strategies."""
    return {r.strategy: r for r in run_scenario(
        "idle", seed=1, quick=True, models=Models(), backend="fake",
        strategies=("punctual", "punctual-direct", "punctual-direct-no-delay-queue"))}


def test_direct_delivers_without_a_consumer_and_bills_the_delay_queue_it_keeps(idle_week):
    """As the construct deploys it, direct delivery keeps the delay queue and its consumer for poll
    requests and failure notices: no task goes through them, but the event source's idle long polls
    are billed as in the default mode."""
    direct, default = summarize(idle_week["punctual-direct"]), summarize(idle_week["punctual"])
    assert direct.delivered == direct.n == 3 and direct.lost == 0 and direct.early == 0
    assert {inv.fn for inv in idle_week["punctual-direct"].invocations} <= {"poller", "editor"}
    assert "consumer" in {inv.fn for inv in idle_week["punctual"].invocations}
    assert direct.by_api[IDLE_RECEIVE_API] == default.by_api[IDLE_RECEIVE_API] > 0
    assert direct.cost_parts["(SQS: idle receives)"] == default.cost_parts["(SQS: idle receives)"] > 1


def test_without_the_delay_queue_no_idle_receives_are_billed(idle_week):
    r = idle_week["punctual-direct-no-delay-queue"]
    s = summarize(r)
    assert s.delivered == s.n == 3 and s.lost == 0 and s.early == 0
    assert not any(actor == "lambda-sqs-poller" for actor, _ in r.requests)  # no event source at all
    assert IDLE_RECEIVE_API not in s.by_api and s.cost_parts["(SQS: idle receives)"] == 0
    with_queue = summarize(idle_week["punctual-direct"])
    assert with_queue.usd_per_million - s.usd_per_million == pytest.approx(
        with_queue.cost_parts["(SQS: idle receives)"], rel=0.05)  # what the control channel costs, nearly all


def test_direct_sends_each_task_to_the_delivery_queue_and_nothing_through_a_consumer():
    """Quick steady (on-time SQS, fake backend): every task delivered once, never early, no consumer
    invocation (every delay-queue message would start one)."""
    (r,) = run_scenario("steady", seed=1, quick=True, models=Models(), strategies=("punctual-direct",),
                        backend="fake")
    s = summarize(r)
    assert s.delivered == s.n and s.lost == 0 and s.early == 0 and s.duplicates == 0
    assert s.max is not None and s.max < 2_000, s.max  # whole seconds of delay, phase-aligned after due
    assert {inv.fn for inv in r.invocations} <= {"poller", "editor"}


@pytest.mark.parametrize(("settings", "deployed"), [
    ({}, True), ({"delivery": "direct"}, True), ({"delivery": "direct", "delay_queue_url": ""}, False)])
def test_a_failure_notice_reaches_the_consumer_only_where_a_delay_queue_is_deployed(settings, deployed):
    """GIVEN a poller invocation whose retries all failed, and a message sent to the delay queue's URL,
    WHEN the simulator runs on, THEN a consumer runs (and the notice's send is billed) only when a delay
    queue is deployed: the default mode and direct delivery as the construct deploys it."""
    sim = PunctualSim(Scenario("t", "", [0], [60_000], 120_000), Models(), seed=1, backend="fake", settings=settings)
    sim._setup_fake()
    sim.frozen = SimpleNamespace(move_to=lambda _: None)
    sim._poll_failed({"id": "rule-event-1"}, attempt=len(sim.rule.retry_delays_ms), error=RuntimeError("boom"))
    sim.h_sqs.send_message(QueueUrl=sim.settings.delay_queue_url, MessageBody="{}")
    sim.engine.run(sim.engine.now + 60_000)

    consumers = [inv for inv in sim.result.invocations if inv.fn == "consumer"]
    assert sim.result.counters["failure_notices"] == 1
    assert bool(consumers) == deployed
    assert (sim.result.requests[("lambda-destination", "sqs.SendMessage")] == 1) == deployed
    assert sim.result.counters["sends_without_delay_queue"] == (0 if deployed else 1)  # shown, never received
