"""The quick benchmark: the real handlers in virtual time keep the invariants, and the
cdk-scheduler model shows its known early deliveries (the comparison is not rigged)."""

from __future__ import annotations

import time

from punctual.bench.models import Models
from punctual.bench.report import summarize
from punctual.bench.run import run_scenario


def test_quick_steady_punctual_never_early_never_lost_and_cdk_scheduler_is_early():
    started = time.process_time()  # CPU: the machine may be shared
    results = {r.strategy: r for r in run_scenario("steady", seed=1, quick=True, models=Models(),
                                                    strategies=("punctual", "cdk-scheduler"))}
    elapsed = time.process_time() - started
    punctual, cdk = summarize(results["punctual"]), summarize(results["cdk-scheduler"])

    assert punctual.n >= 300
    assert punctual.early == 0
    assert punctual.lost == 0
    assert punctual.delivered == punctual.n
    assert punctual.p99 is not None and punctual.p99 < 5_000  # cold start + pickup, never minutes
    # Same scenario, same latency models: the floored-DelaySeconds design delivers early.
    assert cdk.early > 0
    assert elapsed < 60, f"quick steady took {elapsed:.0f} s of CPU"
