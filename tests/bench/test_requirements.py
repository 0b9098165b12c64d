"""``punctual bench`` without its extra: it stops before running, naming what is missing."""

from __future__ import annotations

import argparse
import importlib.util

import pytest

from punctual.bench import run

FIND_SPEC = importlib.util.find_spec


def without(monkeypatch, *names):
    monkeypatch.setattr(run.importlib.util, "find_spec",
                        lambda name, *a: None if name in names else FIND_SPEC(name, *a))


def test_what_each_run_needs(monkeypatch):
    without(monkeypatch, "freezegun", "moto", "matplotlib")
    assert run.missing_modules("moto", plots=True) == ["freezegun", "moto", "matplotlib"]
    assert run.missing_modules("fake", plots=False) == ["freezegun"]  # the fake backend needs no moto
    without(monkeypatch)
    assert run.missing_modules("moto", plots=True) == []  # the dev extra has them all


def test_a_missing_module_stops_the_run_before_it_starts(monkeypatch, tmp_path):
    without(monkeypatch, "matplotlib")
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)  # what `punctual bench` parses
    args = parser.parse_args(["--quick", "--backend", "fake", "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit, match=r"needs matplotlib: pip install 'punctual-aws\[bench\]' \(or pass --no-plots\)"):
        run.main(args)
    assert not (tmp_path / "out").exists()


def test_a_missing_module_is_named_before_the_temporary_folder_is_made(monkeypatch, tmp_path, capsys):
    """Without --out a run makes a new temporary folder and prints it: not when it cannot run (it made
    an empty punctual-bench-* folder, then said freezegun was missing)."""
    without(monkeypatch, "freezegun")
    monkeypatch.setattr(run.tempfile, "tempdir", str(tmp_path))
    parser = argparse.ArgumentParser()
    run.add_arguments(parser)
    with pytest.raises(SystemExit, match=r"needs freezegun: pip install 'punctual-aws\[bench\]'"):
        run.main(parser.parse_args(["--quick", "--backend", "fake", "--no-plots"]))
    assert list(tmp_path.iterdir()) == []
    assert "output:" not in capsys.readouterr().out
