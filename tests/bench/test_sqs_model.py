"""``punctual bench --sqs-model {on-time,early,both}``: which SQS delay-timer model each run uses (the
documented on-time one by default, the early stress reading when asked), and how the tables and
``--json`` report both side by side."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from punctual.bench import run as bench_run
from punctual.bench.models import EARLY_READING_MS, Models
from punctual.bench.punctual_sim import RunResult


def _args(tmp_path, *extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench_run.add_arguments(p)
    return p.parse_args(["--quick", "--scenario", "burst", "--no-plots", "--out", str(tmp_path),
                         "--json", str(tmp_path / "summary.json"), *extra])


@pytest.fixture
def recorded(monkeypatch):
    """run_scenario replaced by one that records the models and delivers one task exactly
    ``sqs_early_max_ms`` before its due time (so the model in use shows in the figures)."""
    seen: list[Models] = []

    def fake_run_scenario(name, seed, quick, models, strategies, tasks=None, backend="moto", settings=None, rate=None):
        seen.append(models)
        due = 60_000
        return [RunResult(s, name, 1, 120_000, {0: [due - models.sqs_early_max_ms]}, [due], [0]) for s in strategies]

    monkeypatch.setattr(bench_run, "run_scenario", fake_run_scenario)
    return seen


def test_the_models_of_each_choice_keep_the_other_overrides():
    base = Models().with_overrides(["cold_start_ms=0,0"])
    assert base.sqs_early_max_ms == 0  # the documented model is the default
    assert bench_run.sqs_models(None, base) == [base]
    (on_time,) = bench_run.sqs_models("on-time", base)
    assert on_time == base and on_time.cold_start_ms == (0, 0)
    (early,) = bench_run.sqs_models("early", base)
    assert early == replace(base, sqs_early_max_ms=EARLY_READING_MS) and early.cold_start_ms == (0, 0)
    assert bench_run.sqs_models("both", base) == [on_time, early]
    assert [bench_run.sqs_model_label(m) for m in bench_run.sqs_models("both", base)] == ["on-time", "early"]
    # --set sqs_early_max_ms sets the early reading's bound; on-time is 0 whatever it says
    bound = replace(base, sqs_early_max_ms=250)
    assert [m.sqs_early_max_ms for m in bench_run.sqs_models("both", bound)] == [0, 250]
    assert [m.sqs_early_max_ms for m in bench_run.sqs_models(None, bound)] == [250]


def test_default_is_the_documented_on_time_model_and_the_tables_stay_as_they_were(tmp_path, recorded):
    assert bench_run.main(_args(tmp_path, "--strategy", "punctual")) == 0

    assert [m.sqs_early_max_ms for m in recorded] == [0]
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["sqs_model"] == "on-time" and "early" not in doc
    assert doc["strategies"]["punctual"]["early"] == 0
    md = (tmp_path / "results-burst.md").read_text()
    assert "| SQS model |" not in md
    assert "Command: `punctual bench --quick --seed 1 --scenario burst --strategy punctual`" in md


def test_early_is_the_stress_reading_and_is_marked_in_the_tables(tmp_path, recorded):
    assert bench_run.main(_args(tmp_path, "--strategy", "punctual", "--sqs-model", "early")) == 0

    assert [m.sqs_early_max_ms for m in recorded] == [EARLY_READING_MS]
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["sqs_model"] == "early"
    assert doc["strategies"]["punctual"]["early"] == 1
    assert "| burst | punctual | early |" in (tmp_path / "results-burst.md").read_text()


def test_both_runs_every_strategy_under_each_model_side_by_side(tmp_path, recorded):
    args = _args(tmp_path, "--strategy", "punctual", "--strategy", "cdk-scheduler", "--sqs-model", "both",
                 "--set", "sqs_early_max_ms=250")
    assert bench_run.main(args) == 0

    assert [m.sqs_early_max_ms for m in recorded] == [0, 250]  # --set still sets the early reading's bound
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["sqs_model"] == "on-time"
    assert {k: (v["early"], v["p50_ms"]) for k, v in doc["strategies"].items()} == {
        "punctual": (0, 0), "cdk-scheduler": (0, 0)}
    assert {k: (v["early"], v["p50_ms"]) for k, v in doc["early"].items()} == {
        "punctual": (1, -250), "cdk-scheduler": (1, -250)}
    md = (tmp_path / "results-burst.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| burst |")][:4]
    assert [r.split(" | ")[1:3] for r in rows] == [
        ["punctual", "on-time"], ["punctual", "early"], ["cdk-scheduler", "on-time"], ["cdk-scheduler", "early"]]
    assert "--sqs-model both --set sqs_early_max_ms=250`" in md
    assert "the stress reading, an assumption" in md


def test_the_on_time_model_reaches_the_simulated_sqs(tmp_path):
    """A real (CI-sized) run of the cdk-scheduler model: its floored DelaySeconds make it up to 1 s
    early on its own; SQS early visibility adds up to another second, and the on-time model removes it."""
    assert bench_run.main(_args(tmp_path, "--strategy", "cdk-scheduler", "--sqs-model", "both")) == 0
    doc = json.loads((tmp_path / "summary.json").read_text())
    on_time, early = doc["strategies"]["cdk-scheduler"], doc["early"]["cdk-scheduler"]
    assert early["delivered"] == on_time["delivered"] == doc["tasks"] == 1_000
    assert early["p50_ms"] < on_time["p50_ms"] - 250

