"""``punctual bench --reading {public,pessimistic,early,both}`` (and ``--sqs-model {on-time,early,both}``, kept):
which models each run uses (the public fit by default, the pessimistic reading and the early SQS timer when
asked), and how the tables and ``--json`` report them side by side."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import replace

import pytest

from punctual.bench import run as bench_run
from punctual.bench.distributions import Fixed, Uniform
from punctual.bench.models import EARLY_READING_MS, PESSIMISTIC, Models
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


def _readings(*argv: str) -> list[tuple[str, Models]]:
    args = _args_only(*argv)
    base = Models().with_overrides(args.set)
    return bench_run.model_readings(bench_run.reading_names(args), base, set_pairs=args.set)


def _args_only(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench_run.add_arguments(p)
    return p.parse_args(list(argv))


def test_the_sqs_model_choices_keep_the_other_overrides():
    base = Models().with_overrides(["cold_start_ms=0,0"])
    assert base.sqs_early_max_ms == 0  # the documented model is the default
    assert _readings("--set", "cold_start_ms=0,0") == [("public", base)]
    ((name, on_time),) = _readings("--sqs-model", "on-time", "--set", "cold_start_ms=0,0")
    assert name == "on-time" and on_time == base and on_time.cold_start_ms == Uniform(0, 0)
    ((name, early),) = _readings("--sqs-model", "early", "--set", "cold_start_ms=0,0")
    assert name == "early" and early == replace(base, sqs_early_max_ms=EARLY_READING_MS)
    both = _readings("--sqs-model", "both", "--set", "cold_start_ms=0,0")
    assert both == [("on-time", on_time), ("early", early)]
    # --set sqs_early_max_ms sets the early reading's bound; on-time is 0 whatever it says
    bound = _readings("--sqs-model", "both", "--set", "sqs_early_max_ms=250")
    assert [m.sqs_early_max_ms for _, m in bound] == [0, 250]
    assert [m.sqs_early_max_ms for _, m in _readings("--set", "sqs_early_max_ms=250")] == [250]


def test_the_pessimistic_reading_takes_every_pessimistic_value_but_the_users():
    """--reading both = the public fit then the pessimistic reading; a parameter the user sets (--set, or a
    models file) keeps the user's value in both; the pessimistic SQS timer is the early one."""
    (public, pessimistic) = _readings("--reading", "both")
    assert [public[0], pessimistic[0]] == ["public", "pessimistic"] and public[1] == Models()
    assert {k: getattr(pessimistic[1], k) for k in PESSIMISTIC} == PESSIMISTIC
    assert pessimistic[1].sqs_early_max_ms == EARLY_READING_MS and pessimistic[1].warm_idle_ms == Fixed(300_000)
    assert pessimistic[1].esm_scale_per_minute == 60 and public[1].esm_scale_per_minute == 300
    differs = {k for k in PESSIMISTIC if getattr(public[1], k) != getattr(pessimistic[1], k)}
    assert differs == set(PESSIMISTIC)
    ((_, a), (_, b)) = _readings("--reading", "both", "--set", "warm_idle_ms=600000")
    assert a.warm_idle_ms == b.warm_idle_ms == Fixed(600_000)
    assert b.cold_start_ms == PESSIMISTIC["cold_start_ms"]
    assert [n for n, _ in _readings("--reading", "early", "--reading", "public")] == ["early", "public"]
    with pytest.raises(SystemExit, match="choose one"):
        _readings("--reading", "early", "--sqs-model", "early")


def test_default_is_the_documented_on_time_model_and_the_tables_stay_as_they_were(tmp_path, recorded):
    assert bench_run.main(_args(tmp_path, "--strategy", "punctual")) == 0

    assert [m.sqs_early_max_ms for m in recorded] == [0]
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["sqs_model"] == "on-time" and "early" not in doc
    assert doc["strategies"]["punctual"]["early"] == 0
    md = (tmp_path / "results-burst.md").read_text()
    assert "| reading |" not in md and "| SQS model |" not in md
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



@pytest.mark.parametrize(("argv", "seeds"), [
    ((), [1]), (("--seed", "3"), [3]), (("--seeds", "1-5"), [1, 2, 3, 4, 5]), (("--seeds", "2,4,9"), [2, 4, 9]),
    (("--seeds", "7"), [7]),
])
def test_seeds_are_a_range_or_a_list(argv, seeds):
    assert bench_run.seeds_of(_args_only(*argv)) == seeds


@pytest.mark.parametrize(("argv", "says"), [
    (("--seed", "1", "--seeds", "1-5"), "--seed and --seeds: choose one"),
    (("--seeds", "a-b"), "a range (1-5) or a list (1,2,3)"),
    (("--seeds", "1,1"), "none twice"),
    (("--seeds", "5-1"), "at least one seed"),
])
def test_bad_seeds_are_refused(argv, says):
    with pytest.raises(SystemExit, match=re.escape(says)):
        bench_run.seeds_of(_args_only(*argv))
