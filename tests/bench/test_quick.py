"""The quick benchmark: the real handlers in virtual time keep the invariants, and the
cdk-scheduler model shows its known early deliveries (the comparison is not rigged).
The in-memory backend (``--backend fake``) gives the same invariants and lateness."""

from __future__ import annotations

import time

import pytest

from punctual.bench.models import Models
from punctual.bench.report import summarize
from punctual.bench.run import run_scenario


@pytest.fixture(scope="module")
def quick_steady():
    started = time.process_time()  # CPU: the machine may be shared
    results = {r.strategy: r for r in run_scenario("steady", seed=1, quick=True, models=Models(),
                                                    strategies=("punctual", "cdk-scheduler"))}
    return results, time.process_time() - started


def test_quick_steady_punctual_never_early_never_lost_and_cdk_scheduler_is_early(quick_steady):
    results, elapsed = quick_steady
    punctual, cdk = summarize(results["punctual"]), summarize(results["cdk-scheduler"])

    assert punctual.n >= 300
    assert punctual.early == 0
    assert punctual.lost == 0
    assert punctual.delivered == punctual.n
    assert punctual.p99 is not None and punctual.p99 < 5_000  # cold start + pickup, never minutes
    # Same scenario, same latency models: the floored-DelaySeconds design delivers early.
    assert cdk.early > 0
    assert elapsed < 60, f"quick steady took {elapsed:.0f} s of CPU"


def _close(a: float | None, b: float | None, rel: float, abs_ms: float) -> bool:
    return a is not None and b is not None and abs(a - b) <= max(abs_ms, rel * b)


def test_fake_backend_keeps_the_invariants_and_matches_moto(quick_steady):
    """Tolerance: lateness percentiles within 10 % or 50 ms of moto's, max within 20 % or
    200 ms, invocations within 5 % (seed 1 gives identical figures on both backends)."""
    results, _ = quick_steady
    moto = summarize(results["punctual"])
    started = time.process_time()
    (r,) = run_scenario("steady", seed=1, quick=True, models=Models(), strategies=("punctual",), backend="fake")
    elapsed = time.process_time() - started
    fake = summarize(r)

    assert fake.n == moto.n
    assert fake.early == 0
    assert fake.lost == 0
    assert fake.delivered == fake.n
    for q in ("p50", "p90", "p99"):
        assert _close(getattr(fake, q), getattr(moto, q), 0.10, 50), (q, getattr(fake, q), getattr(moto, q))
    assert _close(fake.max, moto.max, 0.20, 200), (fake.max, moto.max)
    assert abs(fake.invocations - moto.invocations) <= 0.05 * moto.invocations
    assert elapsed < 10, f"quick steady on the fake backend took {elapsed:.1f} s of CPU"
