"""What AWS bills beyond the functions' own calls (punctual/bench/billing.py): Lambda's START / END / REPORT
lines, in every run's price per million tasks, and the fixed monthly cost reported apart from it (issue 40):
the construct's alarms, the custom metrics the functions emit, the delay queue's idle receives."""

from __future__ import annotations

import pytest

from punctual.bench import prices
from punctual.bench.billing import (
    ALARMS,
    DASHBOARD,
    IDLE_RECEIVE_API,
    emf_metrics,
    fixed_monthly,
    fixed_total,
    idle_receives,
    metric_names,
    platform_log_bytes,
    platform_log_lines,
)
from punctual.bench.models import Models
from punctual.bench.punctual_sim import Invocation, RunResult
from punctual.bench.report import summarize
from punctual.bench.run import run_scenario

DAY_MS = 86_400_000


def test_five_pollers_long_polling_20_s_make_21600_receives_a_day():
    assert idle_receives(DAY_MS, pollers=5, wait_s=20) == 21_600
    assert idle_receives(DAY_MS, pollers=2, wait_s=20) == 8_640
    assert idle_receives(DAY_MS + 1, pollers=1, wait_s=20) == 4_321  # a begun wait is a receive
    assert idle_receives(DAY_MS, pollers=0, wait_s=20) == 0


def test_lambdas_own_lines_are_about_270_bytes_an_invocation():
    warm, cold = platform_log_bytes(512, 12, cold=False), platform_log_bytes(512, 12, cold=True)
    assert 240 <= warm <= 300 and cold > warm
    lines = platform_log_lines(128, 3, cold=True).splitlines()
    assert [line.split(" ")[0] for line in lines] == ["START", "END", "REPORT"]
    assert "Memory Size: 128 MB" in lines[2] and "Init Duration" in lines[2]


def test_lambdas_lines_are_in_the_price_and_the_idle_receives_are_not():
    """The idle receives are a fixed monthly cost: neither in the price per million tasks nor in the
    requests per task (a run counts them, its summary leaves them to the fixed cost)."""
    r = RunResult("x", "steady", 1_000, DAY_MS, {}, [], [],
                  invocations=[Invocation("consumer", 0, 100, True, 1, None), Invocation("poller", 0, 10, False, 1, None)])
    r.requests[("lambda-sqs-poller", IDLE_RECEIVE_API)] = 21_600
    r.requests[("consumer", "sqs.SendMessageBatch")] = 500
    r.fixed_monthly = fixed_monthly(False, metrics=3, idle_pollers=5, idle_wait_s=20)
    s = summarize(r)
    logs = platform_log_bytes(512, 100, True) + platform_log_bytes(1024, 10, False)
    assert s.cost_parts["Logs"] == pytest.approx(logs / 1e9 * prices.LOGS_PER_GB / 1_000 * 1e6)
    assert s.cost_parts["SQS"] == pytest.approx(500 * prices.SQS_REQUEST / 1_000 * 1e6)
    assert IDLE_RECEIVE_API not in s.by_api and s.requests_per_task == 0.5
    assert s.fixed_parts == r.fixed_monthly
    assert s.fixed_usd_month == pytest.approx(1.00 + 0.90 + 0.2628)  # the dashboard (off by default) apart


def test_the_fixed_monthly_cost_by_part():
    """10 alarms in the default mode, 7 in direct delivery (the construct's defaults, tests/infra pins them),
    $0.30 a custom metric, the idle receives of 5 pollers over AWS's 730-hour month, $3 for a dashboard."""
    assert ALARMS == {"default": 10, "direct": 7}
    default = fixed_monthly(False, metrics=3, idle_pollers=5, idle_wait_s=20)
    assert default == pytest.approx({"alarms": 1.00, "custom metrics": 0.90,
                                     "idle receives": 5 * 730 * 180 * 0.40 / 1e6, DASHBOARD: 3.00})
    assert fixed_total(default) == pytest.approx(1.00 + 0.90 + 0.2628)
    direct = fixed_monthly(True, metrics=2, idle_pollers=5, idle_wait_s=20)
    assert direct == pytest.approx({"alarms": 0.70, "custom metrics": 0.60, "idle receives": 0.0, DASHBOARD: 3.00})
    assert fixed_total(fixed_monthly(False, metrics=3, idle_pollers=0, idle_wait_s=20)) == pytest.approx(1.90)


def test_the_metric_names_are_those_of_metrics_names():
    """The count's one list: every name punctual.core.metrics_names defines (a name added there is counted),
    not the dimension's."""
    from punctual.core import metrics_names as names

    assert {names.LATENESS_MS, names.DELIVERED, names.DROPPED, names.REJECTED_ROWS, names.POLL_REQUESTS,
            names.FUNCTION_FAILURES} <= set(metric_names())
    assert names.INSTANCE_DIMENSION not in metric_names()
    assert len(metric_names()) == len({v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}) - 1


def test_an_emf_line_defines_one_metric_per_name_and_dimension_set():
    line = ('{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"Punctual","Dimensions":[["Instance"]],'
            '"Metrics":[{"Name":"LatenessMs","Unit":"Milliseconds"},{"Name":"Delivered","Unit":"Count"}]}]},'
            '"LatenessMs":[3,4],"Delivered":2,"Instance":"jobs"}')
    assert emf_metrics(line) == {("Punctual", "LatenessMs", (("Instance", "jobs"),)),
                                 ("Punctual", "Delivered", (("Instance", "jobs"),))}
    assert emf_metrics('{"level":"INFO","message":"polled"}') == set()
    assert emf_metrics('not json "_aws"') == set()


def test_a_run_reports_the_metrics_its_functions_emitted_and_its_fixed_cost():
    """Quick steady, both modes: the consumer emits LatenessMs, Delivered and Dropped on every invocation, and
    its self-measurement PickupMs and ColdStarts; the direct senders LatenessMs and Delivered; the poller
    PollDelayMs and the editor StreamLagMs in both; each one metric (dimension Instance), $0.30 a month."""
    runs = {r.strategy: r for r in run_scenario("steady", seed=1, quick=True, models=Models(), backend="fake",
                                                strategies=("punctual", "punctual-direct"))}
    default, direct = runs["punctual"], runs["punctual-direct"]
    assert default.metrics_emitted == [f"{n} {{'Instance': 'punctual'}}" for n in (
        "ColdStarts", "Delivered", "Dropped", "LatenessMs", "PickupMs", "PollDelayMs", "StreamLagMs")]
    assert direct.metrics_emitted == [f"{n} {{'Instance': 'punctual'}}" for n in (
        "Delivered", "LatenessMs", "PollDelayMs", "StreamLagMs")]
    assert {m.split(" ")[0] for r in runs.values() for m in r.metrics_emitted} <= set(metric_names())
    assert default.fixed_monthly == pytest.approx(fixed_monthly(False, 7, 5, 20))
    assert direct.fixed_monthly == pytest.approx(fixed_monthly(True, 4, 5, 20))


def test_the_simulator_bills_the_delay_queues_idle_receives_as_a_fixed_cost():
    """Quick idle: 3 tasks over 7 days; the event source polls the empty queue all week: counted, and billed
    as the fixed monthly cost, not in the price per million tasks."""
    models = Models()
    (r,) = run_scenario("idle", seed=1, quick=True, models=models, strategies=("punctual",), backend="fake")
    assert r.requests[("lambda-sqs-poller", IDLE_RECEIVE_API)] == idle_receives(
        r.horizon_ms, models.esm_idle_pollers, models.esm_idle_wait_s) == 5 * 3 * 60 * 24 * 7
    (off,) = run_scenario("idle", seed=1, quick=True, models=Models(esm_idle_pollers=0), strategies=("punctual",),
                          backend="fake")
    on, without = summarize(r), summarize(off)
    assert on.usd_per_million == pytest.approx(without.usd_per_million)
    assert on.fixed_usd_month - without.fixed_usd_month == pytest.approx(5 * 730 * 180 * prices.SQS_REQUEST)
