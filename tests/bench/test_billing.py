"""What AWS bills beyond the functions' own calls (punctual/bench/billing.py): the idle receives of the delay
queue's event source and Lambda's START / END / REPORT lines, in every run's cost."""

from __future__ import annotations

import pytest

from punctual.bench import prices
from punctual.bench.billing import IDLE_RECEIVE_API, idle_receives, platform_log_bytes, platform_log_lines
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


def test_both_are_in_the_cost():
    r = RunResult("x", "steady", 1_000, DAY_MS, {}, [], [],
                  invocations=[Invocation("consumer", 0, 100, True, 1, None), Invocation("poller", 0, 10, False, 1, None)])
    r.requests[("lambda-sqs-poller", IDLE_RECEIVE_API)] = 21_600
    s = summarize(r)
    logs = platform_log_bytes(512, 100, True) + platform_log_bytes(1024, 10, False)
    assert s.cost_parts["Logs"] == pytest.approx(logs / 1e9 * prices.LOGS_PER_GB / 1_000 * 1e6)
    assert s.cost_parts["SQS"] == pytest.approx(21_600 * prices.SQS_REQUEST / 1_000 * 1e6)
    assert s.by_api[IDLE_RECEIVE_API] == pytest.approx(21.6)


def test_the_simulator_bills_the_delay_queues_idle_receives_over_the_whole_run():
    """Quick idle: 3 tasks over 7 days; the event source polls the empty queue all week."""
    models = Models()
    (r,) = run_scenario("idle", seed=1, quick=True, models=models, strategies=("punctual",), backend="fake")
    assert r.requests[("lambda-sqs-poller", IDLE_RECEIVE_API)] == idle_receives(
        r.horizon_ms, models.esm_idle_pollers, models.esm_idle_wait_s) == 5 * 3 * 60 * 24 * 7
    (off,) = run_scenario("idle", seed=1, quick=True, models=Models(esm_idle_pollers=0), strategies=("punctual",),
                          backend="fake")
    assert summarize(r).usd_per_million - summarize(off).usd_per_million == pytest.approx(
        151_200 * prices.SQS_REQUEST / 3 * 1e6)
