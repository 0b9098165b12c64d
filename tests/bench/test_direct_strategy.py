"""``punctual-direct``: Punctual's direct delivery mode as a strategy of the benchmark. Its deliveries
are messages sent to the delivery queue with DelaySeconds, delivered when SQS makes them visible; it
deploys no delay queue and no consumer, so it runs and bills neither: its control channel is an SNS
topic whose messages (poll requests, Lambda's OnFailure records) invoke the poller."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from punctual.bench import run as bench_run
from punctual.bench.billing import IDLE_RECEIVE_API
from punctual.bench.distributions import Fixed
from punctual.bench.models import Models
from punctual.bench.punctual_sim import CONTROL_TOPIC_ARN_FAKE, EPOCH_MS, PunctualSim, RunResult
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
        "idle", seed=1, quick=True, models=Models(), backend="fake", strategies=("punctual", "punctual-direct"))}


def test_direct_deploys_no_delay_queue_so_bills_no_idle_receives_and_runs_no_consumer(idle_week):
    """Direct delivery's control channel is the SNS topic (push): no delay queue, so no event source
    long-polling it (the default mode's week of idle receives), no consumer, no delay-queue call."""
    r = idle_week["punctual-direct"]
    direct, default = summarize(r), summarize(idle_week["punctual"])
    assert direct.delivered == direct.n == 3 and direct.lost == 0 and direct.early == 0
    assert {inv.fn for inv in r.invocations} <= {"poller", "editor"}
    assert "consumer" in {inv.fn for inv in idle_week["punctual"].invocations}
    assert idle_week["punctual"].requests[("lambda-sqs-poller", IDLE_RECEIVE_API)] > 0
    assert default.fixed_parts["idle receives"] == pytest.approx(5 * 730 * 180 * 0.40 / 1e6)  # a month of them
    assert direct.fixed_parts["idle receives"] == 0
    assert not any(actor == "lambda-sqs-poller" for actor, _ in r.requests)  # no event source at all
    assert r.counters["sends_without_delay_queue"] == 0
    assert direct.fixed_usd_month < default.fixed_usd_month


def test_direct_sends_each_task_to_the_delivery_queue_and_nothing_through_a_consumer():
    """Quick steady (on-time SQS, fake backend): every task delivered once, never early, no consumer
    invocation (every delay-queue message would start one)."""
    (r,) = run_scenario("steady", seed=1, quick=True, models=Models(), strategies=("punctual-direct",),
                        backend="fake")
    s = summarize(r)
    assert s.delivered == s.n and s.lost == 0 and s.early == 0 and s.duplicates == 0
    assert s.max is not None and s.max < 2_000, s.max  # whole seconds of delay, phase-aligned after due
    assert {inv.fn for inv in r.invocations} <= {"poller", "editor"}


def _sim(settings: dict, models: Models | None = None) -> PunctualSim:
    sim = PunctualSim(Scenario("t", "", [0], [60_000], 120_000), models or Models(), seed=1, backend="fake",
                      settings=settings)
    sim._setup_fake()
    sim.frozen = SimpleNamespace(move_to=lambda _: None)
    return sim


def test_direct_settings_name_the_control_topic_and_no_delay_queue():
    direct, default = _sim({"delivery": "direct"}), _sim({})
    assert direct.settings.control_topic_arn == CONTROL_TOPIC_ARN_FAKE and direct.settings.delay_queue_url == ""
    assert direct._handler_deps().sns is direct.h_sns
    assert default.settings.control_topic_arn == "" and default.settings.delay_queue_url
    assert default._handler_deps().sns is None  # the default mode asks through the delay queue


@pytest.mark.parametrize(("settings", "consumer"), [({}, True), ({"delivery": "direct"}, False)])
def test_a_failure_notice_goes_to_the_delay_queue_or_in_direct_delivery_to_the_topic(settings, consumer):
    """GIVEN a poller invocation whose retries all failed, WHEN the simulator runs on, THEN its OnFailure
    record reaches the consumer through the delay queue (default mode), or, in direct delivery, is
    published to the control topic (billed as one Publish) and invokes the poller with SNS's event."""
    sim = _sim(settings)
    sim._poll_failed({"id": "rule-event-1"}, attempt=len(sim.rule.retry_delays_ms), error=RuntimeError("boom"))
    sim.engine.run(sim.engine.now + 60_000)

    c, fns = sim.result.counters, [inv.fn for inv in sim.result.invocations]
    assert c["failure_notices"] == 1
    assert ("consumer" in fns) == consumer
    assert (sim.result.requests[("lambda-destination", "sqs.SendMessage")] == 1) == consumer
    published = 0 if consumer else 1
    assert sim.result.requests[("lambda-destination", "sns.Publish")] == published
    assert c["control_published:notice"] == c["control_delivered:notice"] == c["control_invocations"] == published
    assert fns.count("poller") == published and c["control_unrecognised"] == 0  # served as a notice


def test_a_poll_request_published_by_a_handler_invokes_the_poller_after_the_sns_latency():
    sim = _sim({"delivery": "direct"}, Models(sns_delivery_latency_ms=Fixed(70), cold_start_ms=Fixed(300)))
    sim.h_sns.publish(TopicArn=sim.settings.control_topic_arn, Message=json.dumps(
        {"request": "poll", "poll_by_ms": EPOCH_MS + 120_000, "reason": "test"}))
    assert sim.aws.published == []  # the simulator delivers it: the fake keeps nothing
    sim.engine.run(sim.engine.now + 60_000)
    (inv,) = sim.result.invocations
    assert inv.fn == "poller" and inv.start_ms == 70 + 300 and inv.cold and inv.error is None  # the latency, cold
    assert sim.result.counters["control_delivered:request"] == 1
    assert summarize(sim.result).cost_parts["SNS"] == pytest.approx(0.50 / 1e6 * 1e6)  # one Publish, one task


def test_a_failing_control_event_is_retried_as_the_rules_then_its_record_goes_back_to_the_topic():
    """The same async rules as the rule's invocations (RuleSource.attempt): the retries within the
    maximum event age, then the OnFailure record published to the topic, which invokes the poller."""
    sim = _sim({"delivery": "direct"})
    runs: list[dict] = []

    def poller(event, context, deps):
        runs.append(event)
        if len(runs) <= 1 + len(sim.m.poller_retry_delays_ms):
            raise RuntimeError("AskAgain")
        return {"controls": 1}

    sim.topic.invoke = sim._invoker("poller", poller)
    sim.h_sns.publish(TopicArn=sim.settings.control_topic_arn, Message='{"request": "poll"}')
    sim.engine.run(sim.engine.now + 600_000)
    first = runs[0]
    assert runs[:1 + len(sim.m.poller_retry_delays_ms)] == [first] * (1 + len(sim.m.poller_retry_delays_ms))
    notice = json.loads(runs[-1]["Records"][0]["Sns"]["Message"])
    assert notice["requestPayload"] == first and notice["requestContext"]["condition"] == "RetriesExhausted"
    assert sim.result.counters["control_retries"] == len(sim.m.poller_retry_delays_ms)
    assert sim.result.counters["failure_notices"] == 1


def test_an_oversize_failure_record_loses_its_payload_as_lambda_documents():
    sim = _sim({"delivery": "direct"})
    sim._poll_failed({"Records": [{"Sns": {"Message": "x" * 300_000}}]}, len(sim.topic.retry_delays_ms),
                     RuntimeError("boom"))
    assert sim.result.counters["failure_notice_payload_dropped"] == 1
    assert sim.result.requests[("lambda-destination", "sns.Publish")] == 1


@pytest.fixture(scope="module")
def faults_direct():
    (r,) = run_scenario("faults", seed=1, quick=True, models=Models(), strategies=("punctual-direct",),
                        backend="fake")
    return r


def test_faults_in_direct_delivery_send_failure_notices_to_the_topic_and_they_invoke_the_poller(faults_direct):
    r, c = faults_direct, faults_direct.counters
    s = summarize(r)
    assert s.lost == 0 and s.delivered == s.n and s.early == 0
    assert c["failure_notices"] > 0
    assert c["control_published:notice"] == c["failure_notices"]
    assert c["control_delivered:notice"] == c["control_published:notice"]  # each invokes the poller
    assert c["control_invocations"] >= c["control_delivered:notice"] + c["control_delivered:request"]
    assert r.requests[("lambda-destination", "sns.Publish")] >= c["failure_notices"]
    assert {inv.fn for inv in r.invocations} <= {"poller", "editor"}
    assert IDLE_RECEIVE_API not in s.by_api and not any(api.startswith("sqs.") and api != "sqs.SendMessageBatch"
                                                        for api in s.by_api)  # only the delivery sends
    assert c["sends_without_delay_queue"] == 0 and s.cost_parts["SNS"] > 0


def test_in_direct_delivery_the_faults_scenarios_delay_queue_outage_is_the_control_topics():
    """No delay queue to take down: the topic is out in its slot. The handlers' Publish fails, and
    Lambda's OnFailure record cannot be delivered (counted, not published)."""
    sim = _sim({"delivery": "direct"})
    sim.outages = [sim._outage("delay queue", EPOCH_MS, EPOCH_MS + 60_000)]
    assert _sim({})._outage("delay queue", 0, 1).queue_url  # the default mode: the delay queue's calls

    def poller(event, deps):
        deps.sns.publish(TopicArn=sim.settings.control_topic_arn, Message="{}")

    sim._invoke("poller", sim.engine.now, lambda _context, deps: poller({}, deps), lambda proc: None)
    sim.engine.run(sim.engine.now + 1_000)
    assert isinstance(sim.result.invocations[0].error, str) and sim.result.counters["outage_call_failures"] == 1
    sim._poll_failed({"id": "rule-event-1"}, attempt=len(sim.rule.retry_delays_ms), error=RuntimeError("boom"))
    assert sim.result.counters["failure_notices_undelivered"] == 1
    assert sim.result.requests[("lambda-destination", "sns.Publish")] == 0


def test_the_default_early_margin_keeps_direct_delivery_never_early_under_the_early_reading():
    """Quick steady (fake backend) under the early reading (SQS showing a delayed message up to 1 s
    before its delay ends: an assumption, EARLY_READING_MS): with the default direct_early_margin_ms
    (1,000) no task is early, and on time every timed one is a second later; with a margin of 0 most
    are early (the reading bites: the check is not rigged). Mutant: the margin not applied to the
    sends (377 of 400 early)."""
    from punctual.bench.models import EARLY_READING_MS
    from punctual.core.config import Settings

    early = replace(Models(), sqs_early_max_ms=EARLY_READING_MS)
    assert Settings().direct_early_margin_ms == EARLY_READING_MS

    def run(models: Models, **settings: int):
        (r,) = run_scenario("steady", seed=1, quick=True, models=models, strategies=("punctual-direct",),
                            backend="fake", settings=settings)
        return summarize(r)

    default, bare = run(early), run(early, direct_early_margin_ms=0)
    assert default.delivered == default.n and default.early == 0
    assert bare.early > bare.n * 0.9
    on_time = run(Models())
    assert on_time.early == 0 and on_time.p50 is not None and on_time.p50 >= EARLY_READING_MS
