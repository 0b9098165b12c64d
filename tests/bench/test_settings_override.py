"""``punctual bench --setting NAME=VALUE``: Settings overrides for every Punctual run."""

from __future__ import annotations

import pytest

from punctual.bench.models import Models
from punctual.bench.run import run_scenario, settings_overrides


def test_integer_settings_are_parsed_and_anything_else_refused():
    assert settings_overrides(["wake_early_ms=250", "group_span_ms=0"]) == {"wake_early_ms": 250, "group_span_ms": 0}
    with pytest.raises(SystemExit, match="not an integer Settings field"):
        settings_overrides(["table_name=x"])
    with pytest.raises(SystemExit, match="not an integer"):
        settings_overrides(["wake_early_ms=soon"])


def test_an_override_reaches_the_simulated_handlers():
    """wake_early_ms=0 ceils DelaySeconds to the due time itself: with on-time SQS nothing is
    visible before due, so (quick steady, seed 1) the median lateness is hundreds of ms."""
    on_time = Models()  # the documented on-time model
    base, zero = (run_scenario("steady", seed=1, quick=True, models=on_time, strategies=("punctual",),
                               backend="fake", settings=over)[0] for over in ({}, {"wake_early_ms": 0}))
    late = [sorted(min(t) - r.dues[i] for i, t in r.deliveries.items()) for r in (base, zero)]
    assert late[0][len(late[0]) // 2] < 50 < 200 < late[1][len(late[1]) // 2]


def test_the_consumers_memory_prices_its_wait_and_speeds_its_calls():
    """``--set consumer_memory_mb=N`` (the trade-off curve of docs/benchmark.md): the consumer's
    client CPU scales with its memory, so a quick burst (its sends) is delivered sooner with more
    (p99 93 -> 74 ms, seed 1; it was 4.5 -> 2.4 s while the consumer made two calls a row); every
    consumer invocation is billed at the size it ran with."""
    import dataclasses

    from punctual.bench.report import summarize

    runs = {mb: run_scenario("burst", seed=1, quick=True, models=dataclasses.replace(Models(), consumer_memory_mb=mb),
                             strategies=("punctual",), backend="fake")[0] for mb in (512, 1024)}
    p99 = {mb: sorted(min(t) - r.dues[i] for i, t in r.deliveries.items())[int(0.99 * r.n)] for mb, r in runs.items()}
    assert p99[1024] < 0.9 * p99[512]
    assert {inv.memory_mb for inv in runs[1024].invocations if inv.fn == "consumer"} == {1024}
    consumer = {mb: summarize(r).cost_parts["(Lambda consumer)"] for mb, r in runs.items()}
    assert consumer[1024] > consumer[512]
