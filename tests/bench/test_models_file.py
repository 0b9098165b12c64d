"""``punctual bench --models FILE``: model overrides from a JSON file (what ``punctual calibrate`` writes), the
bench running with them, and a bad file refused with one line saying where and why."""

from __future__ import annotations

import argparse
import json

import pytest

from punctual.bench import models_file
from punctual.bench import run as bench_run
from punctual.bench.distributions import Empirical, Fixed, LogNormal, Samples, Uniform
from punctual.bench.models import PESSIMISTIC, Models
from punctual.bench.punctual_sim import RunResult

CALIBRATED = {
    "source": "punctual calibrate, account 123456789012, eu-west-1, 2027-01-03 to 2027-01-10",
    "models": {
        "sqs_poll_latency_ms": {"quantiles": {"0.5": 18, "0.9": 41, "0.99": 130, "0.999": 410},
                                "source": "PickUpMs, 41,204 invocations"},
        "cold_start_ms": {"lognormal": {"0.5": 320, "0.99": 1_100}, "cap": 10_000},
        "stream_latency_ms": {"samples": [120, 131, 190, 260]},
        "rule_target_delay_ms": [50, 1_500],
        "warm_idle_ms": 300_000,
        "esm_scale_per_minute": 60,
        "client_cpu_scale": 0.5,
        "api_latency_ms": {"sqs": [4, 9]},
        "async_retry_delays_ms": [60_000],
    },
    "pessimistic": {"sqs_poll_latency_ms": {"uniform": [50, 900]}},
}


def _write(tmp_path, doc) -> str:
    path = tmp_path / "models.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def _args(tmp_path, *extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    bench_run.add_arguments(p)
    return p.parse_args(["--quick", "--scenario", "steady", "--strategy", "punctual", "--no-plots", "--out",
                         str(tmp_path), "--json", str(tmp_path / "summary.json"), *extra])


def test_a_calibrated_file_gives_every_reading_its_values(tmp_path):
    file = models_file.load(_write(tmp_path, CALIBRATED))
    base = Models(**file.models)
    assert base.sqs_poll_latency_ms == Empirical(((0.5, 18.0), (0.9, 41.0), (0.99, 130.0), (0.999, 410.0)))
    assert isinstance(base.cold_start_ms, LogNormal) and base.cold_start_ms.quantile(0.5) == pytest.approx(320)
    assert base.cold_start_ms.cap == 10_000 and base.cold_start_ms.quantile(0.99) == pytest.approx(1_100)
    assert base.stream_latency_ms == Samples((120, 131, 190, 260))
    assert base.rule_target_delay_ms == Uniform(50, 1_500) and base.warm_idle_ms == Fixed(300_000)
    assert (base.esm_scale_per_minute, base.client_cpu_scale) == (60, 0.5)
    assert base.api_latency_ms == {**Models().api_latency_ms, "sqs": (4, 9)}
    assert base.async_retry_delays_ms == (60_000,)
    assert file.sources["sqs_poll_latency_ms"] == "PickUpMs, 41,204 invocations"
    assert file.sources["warm_idle_ms"] == CALIBRATED["source"]
    (_, public), (_, pessimistic) = bench_run.model_readings(["public", "pessimistic"], base, file)
    assert public == base
    # the file's values are the account's: kept in the pessimistic reading too, but for its own section
    assert pessimistic.sqs_poll_latency_ms == Uniform(50, 900)
    assert pessimistic.cold_start_ms == base.cold_start_ms and pessimistic.warm_idle_ms == Fixed(300_000)
    assert pessimistic.sns_delivery_latency_ms == PESSIMISTIC["sns_delivery_latency_ms"]  # not in the file
    with_set = base.with_overrides(["sqs_poll_latency_ms=7"])
    ((_, set_wins),) = bench_run.model_readings(["pessimistic"], with_set, file, ["sqs_poll_latency_ms=7"])
    assert set_wins.sqs_poll_latency_ms == Fixed(7)  # --set wins over the file's pessimistic section


def test_the_bench_runs_with_the_files_models_and_names_their_source(tmp_path, monkeypatch):
    seen: list[Models] = []

    def fake_run_scenario(name, seed, quick, models, strategies, tasks=None, backend="moto", settings=None, rate=None):
        seen.append(models)
        return [RunResult(s, name, 1, 120_000, {0: [60_001]}, [60_000], [0]) for s in strategies]

    monkeypatch.setattr(bench_run, "run_scenario", fake_run_scenario)
    path = _write(tmp_path, CALIBRATED)
    assert bench_run.main(_args(tmp_path, "--models", path, "--set", "esm_scale_per_minute=120")) == 0
    (models,) = seen
    assert models.sqs_poll_latency_ms == models_file.load(path).models["sqs_poll_latency_ms"]
    assert models.esm_scale_per_minute == 120  # --set applies on top of the file
    md = (tmp_path / "results-steady.md").read_text()
    assert f"--models {path} --set esm_scale_per_minute=120`" in md
    assert "- `sqs_poll_latency_ms` = measured quantiles p50 18, p90 41, p99 130, p99.9 410 ms" in md
    assert "PickUpMs, 41,204 invocations" in md


def test_a_file_and_the_same_set_give_the_same_figures(tmp_path):
    """A real (CI-sized) run: cold starts fixed at 0 by the file or by --set, the same figures."""
    path = _write(tmp_path, {"models": {"cold_start_ms": 0}})
    assert bench_run.main(_args(tmp_path / "file", "--models", path, "--backend", "fake")) == 0
    assert bench_run.main(_args(tmp_path / "set", "--set", "cold_start_ms=0", "--backend", "fake")) == 0
    by_file, by_set = (json.loads((tmp_path / d / "summary.json").read_text())["strategies"] for d in ("file", "set"))
    assert by_file == by_set
    default = tmp_path / "default"
    assert bench_run.main(_args(default, "--backend", "fake")) == 0
    assert json.loads((default / "summary.json").read_text())["strategies"] != by_file  # cold starts matter


@pytest.mark.parametrize(("doc", "says"), [
    ("{not json", "not JSON: Expecting property name enclosed in double quotes at line 1, column 2"),
    ([1, 2], "the file must hold a JSON object"),
    ({"model": {}}, "unknown key 'model'"),
    ({"source": "x"}, "nothing to override"),
    ({"models": {"cold_start": 300}}, "models.cold_start: unknown model parameter; known: "),
    ({"models": {"cold_start_ms": "300"}}, "models.cold_start_ms: a number (fixed ms), [lo, hi] or an object"),
    ({"models": {"cold_start_ms": [800, 300]}}, "models.cold_start_ms: [lo, hi], whole ms with 0 <= lo <= hi"),
    ({"models": {"cold_start_ms": {"gamma": {}}}}, "models.cold_start_ms: one family among 'uniform', 'lognormal'"),
    ({"models": {"cold_start_ms": {"lognormal": {"0.5": 300}}}},
     "models.cold_start_ms.lognormal: a log-normal needs at least 2 quantiles"),
    ({"models": {"cold_start_ms": {"quantiles": {"50": 300}}}},
     "models.cold_start_ms.quantiles: '50' is not a probability (0 to 1)"),
    ({"models": {"sqs_poll_latency_ms": {"quantiles": {"0.5": 30, "0.9": 20}}}},
     "models.sqs_poll_latency_ms.quantiles: p0.9 (20 ms) below p0.5 (30 ms): quantiles never fall"),
    ({"models": {"stream_latency_ms": {"samples": []}}}, "models.stream_latency_ms.samples: a non-empty list"),
    ({"models": {"stream_latency_ms": {"quantiles": {"0.5": 1}, "cap": 9}}}, "'cap' applies to 'lognormal' only"),
    ({"models": {"esm_scale_per_minute": 2.5}}, "models.esm_scale_per_minute: a whole number >= 0, got 2.5"),
    ({"pessimistic": {"api_latency_ms": {"s3": [1, 2]}}}, "pessimistic.api_latency_ms.s3: unknown service"),
    ({"models": {"warm_idle_ms": 1.5}}, "models.warm_idle_ms: a fixed value is whole ms >= 0, got 1.5"),
])
def test_a_bad_file_is_refused_with_one_line_saying_where(tmp_path, doc, says):
    path = _write(tmp_path, doc)
    with pytest.raises(SystemExit) as refused:
        bench_run.main(_args(tmp_path, "--models", path))
    message = str(refused.value)
    assert message.startswith(f"--models {path}: ") and "\n" not in message
    assert says in message


def test_a_missing_file_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(SystemExit, match=r"--models /nonexistent/models.json: cannot read it"):
        bench_run.main(_args(tmp_path, "--models", "/nonexistent/models.json"))
    assert not list(tmp_path.glob("results*"))
