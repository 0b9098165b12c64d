"""``punctual bench --json``: the machine-readable summary is built from the run's Summary rows."""

from __future__ import annotations

import json

from punctual.bench.report import Summary, combine_seeds, machine_summary, strategy_figures, table


def _summary(strategy: str, scenario: str = "burst", **changes) -> Summary:
    fields = dict(strategy=strategy, scenario=scenario, n=1_000, delivered=998, lost=2, early=0, duplicates=3,
                  p50=12.4, p90=80.6, p99=640.0, max=1_234.5, invocations=10, idle_per_day=0.0,
                  requests_per_task=2.987654, by_api={}, usd_per_million=1.234567, cost_parts={}, wall_s=1.0)
    return Summary(**{**fields, **changes})


def test_one_scenario_gives_one_object_in_the_issue_shape():
    doc = machine_summary([_summary("punctual"), _summary("cdk-scheduler", early=1_000, p50=-900.2)])

    assert doc == {
        "scenario": "burst", "tasks": 1_000, "reading": "public", "sqs_model": "on-time",
        "strategies": {
            "punctual": {"delivered": 998, "lost": 2, "early": 0, "duplicates": 3, "p50_ms": 12, "p90_ms": 81,
                         "p99_ms": 640, "max_ms": 1_234, "usd_per_million": 1.2346, "requests_per_task": 2.9877,
                         "events_throttled": 0, "fixed_usd_month": None},
            "cdk-scheduler": {"delivered": 998, "lost": 2, "early": 1_000, "duplicates": 3, "p50_ms": -900,
                              "p90_ms": 81, "p99_ms": 640, "max_ms": 1_234, "usd_per_million": 1.2346,
                              "requests_per_task": 2.9877, "events_throttled": 0, "fixed_usd_month": None},
        },
    }
    assert json.loads(json.dumps(doc)) == doc


def test_lateness_is_whole_ms_or_null_when_nothing_was_delivered():
    figures = strategy_figures(_summary("punctual", delivered=0, lost=1_000, p50=None, p90=None, p99=None, max=None))
    assert [figures[k] for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")] == [None, None, None, None]
    assert isinstance(strategy_figures(_summary("punctual"))["p50_ms"], int)
    assert '"p99_ms": null' in json.dumps(figures)


def test_several_scenarios_give_a_list_in_the_order_of_the_summaries():
    doc = machine_summary([_summary("punctual", "steady", n=400), _summary("punctual", "burst"),
                           _summary("eventbridge-scheduler", "steady", n=400)])
    assert isinstance(doc, list)
    assert [(o["scenario"], o["tasks"], sorted(o["strategies"])) for o in doc] == [
        ("steady", 400, ["eventbridge-scheduler", "punctual"]), ("burst", 1_000, ["punctual"])]


def test_each_other_reading_goes_under_its_name_with_the_same_strategies_map():
    on_time = [_summary("punctual", early=0, reading="on-time"), _summary("cdk-scheduler", early=700, reading="on-time")]
    early = [_summary("punctual", early=5, reading="early", sqs_model="early"),
             _summary("cdk-scheduler", early=900, reading="early", sqs_model="early")]
    doc = machine_summary(on_time + early)
    assert (doc["reading"], doc["sqs_model"]) == ("on-time", "on-time")
    assert {k: v["early"] for k, v in doc["strategies"].items()} == {"punctual": 0, "cdk-scheduler": 700}
    assert {k: v["early"] for k, v in doc["early"].items()} == {"punctual": 5, "cdk-scheduler": 900}
    assert doc["early"]["punctual"].keys() == doc["strategies"]["punctual"].keys()
    assert "early" not in machine_summary(on_time)
    pessimistic = [_summary("punctual", p99=900.0, reading="pessimistic", sqs_model="early")]
    doc = machine_summary([_summary("punctual", reading="public"), *pessimistic])
    assert doc["reading"] == "public" and doc["pessimistic"]["punctual"]["p99_ms"] == 900


def test_several_seeds_give_the_medians_their_range_and_each_seeds_figures():
    """The median of each quantile over the seeds, its range (min, max), lost / early / dup the most in any
    seed, and every seed's own figures kept (report.combine_seeds)."""
    runs = [(seed, _summary("punctual", p50=p50, p99=p99, max=mx, lost=lost, usd_per_million=usd))
            for seed, p50, p99, mx, lost, usd in ((1, 30.0, 40.0, 700.0, 0, 10.0), (2, 31.0, 99.0, 900.0, 2, 10.5),
                                                  (3, 29.0, 171.0, 650.0, 0, 9.5), (4, 32.0, 60.0, 800.0, 0, 10.2),
                                                  (5, 30.0, 50.0, 2_000.0, 1, 10.1))]
    s = combine_seeds(runs)
    assert (s.p50, s.p99, s.max, s.usd_per_million, s.lost) == (30.0, 60.0, 800.0, 10.1, 2)
    assert s.spread["p99"] == [40.0, 171.0] and s.spread["max"] == [650.0, 2_000.0]
    assert s.seeds == [1, 2, 3, 4, 5] and [f["p99_ms"] for f in s.per_seed] == [40, 99, 171, 60, 50]
    figures = strategy_figures(s)
    assert figures["p99_ms"] == 60 and figures["range"]["p99_ms"] == [40.0, 171.0]
    assert [f["seed"] for f in figures["seeds"]] == [1, 2, 3, 4, 5]
    assert "60 ms (40-171)" in table([s]) and "| 1-5 |" in table([s])
    assert "range" not in strategy_figures(runs[0][1])  # one seed: no range
