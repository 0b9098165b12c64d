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


@pytest.mark.xfail(strict=True, reason="not met once the client's CPU is counted (issue 29): the poll claims "
                   "every row with its own UpdateItem, ~94 s of CPU at 1,024 MB, now from ~5 min before due (lead 300 s), "
                   "and the consumers ramp up with Lambda's SQS scaling: p50 1.9 s, p99 4.1 s, seed 1. Strict: meeting "
                   "it fails this marker")
def test_invariant_8_fifty_thousand_due_in_one_second_are_delivered_within_a_second(burst):
    assert burst.n == BURST and burst.delivered == BURST and burst.lost == 0
    assert burst.early == 0 and burst.duplicates == 0
    assert burst.p99 is not None and burst.p99 < 1_000, burst.p99
    assert burst.max is not None and burst.max < 2_000, burst.max  # the bound on the tail


def test_invariant_7_tasks_due_together_cost_at_most_3_billed_requests_each(burst):
    """Beyond the user's own put (not counted): measured 1.70 before issue 28's per-row fence, 3.73
    with it, and met again since the fence is per partition and due second and the deletes go 100
    per transaction (issue 29)."""
    assert burst.requests_per_task <= 3, burst.by_api


@pytest.mark.xfail(strict=True, reason="not met: the per-row claim (1 write unit) and the transactional delete "
                   "(2) are $1.88 per million, $2.50 with the user's put ($2.82 in all, seed 1; docs/benchmark.md, "
                   "'Cost floors'); strict, so meeting it fails "
                   "this marker and the test becomes a plain assertion")
def test_invariant_7_tasks_due_together_cost_less_than_eventbridge_scheduler(burst):
    assert burst.usd_per_million < SCHEDULER_USD_PER_MILLION, burst.cost_parts
