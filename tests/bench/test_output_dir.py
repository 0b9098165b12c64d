"""``punctual bench`` writes into the repository (bench/results/) only when asked (``--publish``); by
default into a new temporary directory it prints, or into ``--out DIR``."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pytest

from punctual.bench import run as bench_run
from punctual.bench.punctual_sim import RunResult


def _args(*extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench_run.add_arguments(p)
    return p.parse_args(["--quick", "--scenario", "burst", "--strategy", "punctual", "--no-plots", *extra])


@pytest.fixture
def in_a_checkout(tmp_path, monkeypatch):
    """The current directory looks like the repository root; runs are replaced by a one-task result."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench" / "results").mkdir(parents=True)

    def one_task(name, seed, quick, models, strategies, tasks=None, backend="moto", settings=None, rate=None):
        return [RunResult(s, name, 1, 120_000, {0: [60_000]}, [60_000], [0]) for s in strategies]

    monkeypatch.setattr(bench_run, "run_scenario", one_task)
    return tmp_path


def test_by_default_a_new_temporary_directory_is_printed_and_the_repository_is_untouched(in_a_checkout, capsys):
    assert bench_run.main(_args()) == 0

    assert list((in_a_checkout / "bench" / "results").iterdir()) == []
    printed = capsys.readouterr().out
    out = Path(printed.split("output: ", 1)[1].split(" ", 1)[0])
    assert out.is_dir() and (out / "results-burst.md").exists()
    assert out.resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())


def test_publish_writes_the_repositorys_results(in_a_checkout):
    assert bench_run.main(_args("--publish")) == 0
    assert (in_a_checkout / "bench" / "results" / "results-burst.md").exists()


def test_out_writes_where_it_says(in_a_checkout):
    assert bench_run.main(_args("--out", "elsewhere")) == 0
    assert (in_a_checkout / "elsewhere" / "results-burst.json").exists()
    assert list((in_a_checkout / "bench" / "results").iterdir()) == []


def test_out_and_publish_together_or_combine_without_a_directory_are_refused(in_a_checkout):
    with pytest.raises(SystemExit, match="choose one"):
        bench_run.main(_args("--out", "x", "--publish"))
    with pytest.raises(SystemExit, match="--combine needs"):
        bench_run.main(_args("--combine"))
