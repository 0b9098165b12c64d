"""Invariants 7 and 8 (docs/architecture.md), measured at the size invariant 8 states: 50,000 tasks due
in one second, the real handlers on the in-memory AWS in virtual time, the default models (the documented
on-time SQS model, the client's CPU per call counted).

One run (~1 min of CPU) serves every test of this module."""

from __future__ import annotations

import pytest

from punctual.bench.models import Models
from punctual.bench.report import summarize
from punctual.bench.run import run_scenario

BURST = 50_000
SCHEDULER_USD_PER_MILLION = 1.40  # EventBridge Scheduler incl. its SQS send (punctual/bench/prices.py)


@pytest.fixture(scope="module")
def burst():
    (r,) = run_scenario("burst", seed=1, quick=False, models=Models(), strategies=("punctual",),
                        backend="fake", tasks=BURST)
    return summarize(r)


@pytest.mark.xfail(strict=True, reason="not met once the client's CPU is counted (issue 29): each consumer of the "
                   "cluster (60, made visible 12 s early for Lambda's SQS scaling, 834 rows each) spends ~0.5 s of "
                   "client CPU at 512 MB on its sends, and the hand-offs reach the last ones late: p50 323 ms, "
                   "p99 1,435 ms, max 1,541 ms, seed 1. Strict: meeting it fails this marker")
def test_invariant_8_fifty_thousand_due_in_one_second_are_delivered_within_a_second(burst):
    assert burst.n == BURST and burst.delivered == BURST and burst.lost == 0
    assert burst.early == 0 and burst.duplicates == 0
    assert burst.p99 is not None and burst.p99 < 1_000, burst.p99
    assert burst.max is not None and burst.max < 2_000, burst.max  # the bound on the tail


def test_invariant_7_tasks_due_together_cost_at_most_3_billed_requests_each(burst):
    """Beyond the user's own put (not counted): measured 1.70 before issue 28's per-row fence, 3.73
    with it, and met again since the fence is per partition and due second (issue 29); the deletes
    are a DeleteItem a row since (1 write unit where a transaction's cost 2): 2.46 at seed 1."""
    assert burst.requests_per_task <= 3, burst.by_api


@pytest.mark.xfail(strict=True, reason="not met: the per-row claim (1 write unit) and the conditional delete "
                   "(1) are $1.25 per million, $1.88 with the user's put ($2.29 in all, seed 1; docs/benchmark.md, "
                   "'Cost floors'); strict, so meeting it fails "
                   "this marker and the test becomes a plain assertion")
def test_invariant_7_tasks_due_together_cost_less_than_eventbridge_scheduler(burst):
    assert burst.usd_per_million < SCHEDULER_USD_PER_MILLION, burst.cost_parts
