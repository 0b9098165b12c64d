"""EMF records: namespace and the Instance dimension come from the Settings, on every metric."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from punctual.core import observability as obs
from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.metrics_names import INSTANCE_DIMENSION, LATENESS_MS, REJECTED_ROWS
from punctual.core.runtime import start_invocation


@pytest.fixture(autouse=True)
def fresh_process():
    """No invocation bound yet."""
    obs._invocation.set({})


def environment() -> SimpleNamespace:
    """What runtime.start_invocation reads of an execution environment's Deps (new: not warm yet)."""
    return SimpleNamespace(warm=False, clock=ManualClock(0))


@pytest.fixture
def emitted():
    buf = io.StringIO()
    obs.set_stream(buf)
    yield lambda: [json.loads(line) for line in buf.getvalue().splitlines()]
    obs.set_stream(None)


def test_record_carries_the_instance_dimension_and_namespace(emitted):
    s = Settings(metrics_namespace="Acme", instance_name="orders-eu")
    obs.metric(s, LATENESS_MS, [3, 40], unit="Milliseconds", timestamp_ms=1_700_000_000_123)
    (rec,) = emitted()
    (directive,) = rec["_aws"]["CloudWatchMetrics"]
    assert directive == {
        "Namespace": "Acme",
        "Dimensions": [[INSTANCE_DIMENSION]],
        "Metrics": [{"Name": LATENESS_MS, "Unit": "Milliseconds"}],
    }
    # EMF: each dimension key is also a root member holding its value
    assert rec[INSTANCE_DIMENSION] == "orders-eu"
    assert rec[LATENESS_MS] == [3, 40]
    assert rec["_aws"]["Timestamp"] == 1_700_000_000_123


def test_two_instances_emit_apart(emitted):
    for name in ("a", "b"):
        obs.metric(Settings(instance_name=name), REJECTED_ROWS, 1)
    assert [rec[INSTANCE_DIMENSION] for rec in emitted()] == ["a", "b"]


def test_properties_cannot_change_the_dimension_or_the_directive(emitted):
    """Properties are logged alongside; they neither add dimensions nor override the metric's."""
    s = Settings(instance_name="mine")
    obs.metric(s, REJECTED_ROWS, 1, code="malformed", **{INSTANCE_DIMENSION: "other", "_aws": "x"})
    (rec,) = emitted()
    assert rec["code"] == "malformed"
    assert rec[INSTANCE_DIMENSION] == "mine"
    assert rec["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[INSTANCE_DIMENSION]]


def test_lines_carry_the_request_id_and_the_cold_start_flag(emitted):
    deps = environment()
    start_invocation(SimpleNamespace(function_name="poller", aws_request_id="r1"), deps)
    obs.log("INFO", "one", request_id="forged", cold_start="forged")
    obs.metric(Settings(), REJECTED_ROWS, 1)
    start_invocation(SimpleNamespace(function_name="poller", aws_request_id="r2"), deps)
    obs.log("INFO", "two")
    first, metric, second = emitted()
    assert (first["request_id"], first["cold_start"], first["message"]) == ("r1", True, "one")
    assert (metric["request_id"], metric["cold_start"]) == ("r1", True)
    assert (second["request_id"], second["cold_start"]) == ("r2", False)


def test_cold_start_is_per_execution_environment_and_a_context_may_be_missing(emitted):
    """An execution environment's Deps are built on its cold start (runtime.default_deps in Lambda; the
    local stack's functions and the benchmark's environments each have their own): the first
    invocation with them is the cold one, whatever ran in the process before."""
    poller, editor = environment(), environment()
    start_invocation(SimpleNamespace(function_name="poller", aws_request_id="a"), poller)
    assert obs.cold_start()
    start_invocation(SimpleNamespace(function_name="editor", aws_request_id="b"), editor)
    assert obs.cold_start()
    start_invocation(SimpleNamespace(function_name="poller", aws_request_id="c"), poller)
    assert not obs.cold_start()
    assert obs.start_invocation(None, cold_start=True) == {"cold_start": True}
    obs.log("INFO", "no context")
    (rec,) = emitted()
    assert "request_id" not in rec and rec["cold_start"] is True


# -- EMF limits ----------------------------------------------------------------------------------
# The CloudWatch EMF specification ("Specification: Embedded metric format", document structure):
# a metric's value array holds at most 100 values, a directive at most 100 MetricDefinitions, a
# DimensionSet at most 30 keys; every metric and dimension named in a directive is a root member.
SPEC_MAX_VALUES, SPEC_MAX_METRICS, SPEC_MAX_DIMENSIONS = 100, 100, 30


def assert_valid_emf(rec):
    """One record as the specification requires it (the limits above and the target members)."""
    (directive,) = rec["_aws"]["CloudWatchMetrics"]
    assert isinstance(rec["_aws"]["Timestamp"], int)
    assert len(directive["Metrics"]) <= SPEC_MAX_METRICS
    for dimension_set in directive["Dimensions"]:
        assert len(dimension_set) <= SPEC_MAX_DIMENSIONS
        assert all(isinstance(rec[key], str) for key in dimension_set)
    for definition in directive["Metrics"]:
        value = rec[definition["Name"]]
        values = value if isinstance(value, list) else [value]
        assert 1 <= len(values) <= SPEC_MAX_VALUES and all(isinstance(v, int | float) for v in values)


def values_of(records, name):
    out = []
    for rec in records:
        value = rec.get(name)
        out += value if isinstance(value, list) else [] if value is None else [value]
    return out


@pytest.mark.parametrize("n, records", [(1, 1), (100, 1), (101, 2), (400, 4), (1000, 10)])
def test_a_long_value_array_is_split_into_records_of_at_most_100_values(emitted, n, records):
    """GIVEN n lateness values (a 1,000-row group gives 1,000) WHEN emitted THEN every record keeps
    the specification's limits and together they carry every value once, in order."""
    values = list(range(n))
    obs.metric(Settings(instance_name="i"), LATENESS_MS, values, unit="Milliseconds", timestamp_ms=5)
    out = emitted()
    assert len(out) == records
    for rec in out:
        assert_valid_emf(rec)
        assert rec[INSTANCE_DIMENSION] == "i" and rec["_aws"]["Timestamp"] == 5
    assert values_of(out, LATENESS_MS) == values


def test_many_metrics_are_split_at_100_per_record_and_each_slice_keeps_its_record():
    metrics = [(f"M{i}", "Count", [i] * 150) for i in range(150)]
    records = obs.emf_records("N", {"Instance": "x"}, metrics, 1)
    # 150 values each: two slices (100 + 50); 150 metrics each: two records per slice
    assert len(records) == 4
    for rec in records:
        assert_valid_emf(rec)
    for name, _, values in metrics:
        assert values_of(records, name) == values


def test_dimension_sets_over_30_keys_and_clashing_names_are_refused():
    with pytest.raises(ValueError, match="at most 30"):
        obs.emf_records("N", {f"d{i}": "v" for i in range(31)}, [("M", "Count", 1)], 1)
    assert len(obs.emf_records("N", {f"d{i}": "v" for i in range(30)}, [("M", "Count", 1)], 1)) == 1
    with pytest.raises(ValueError, match="distinct"):
        obs.emf_records("N", {"Instance": "x"}, [("Instance", "Count", 1)], 1)


# CloudWatch Logs: "Each log event can be no larger than 256 KB"; a batch counts "the sum of all event
# messages in UTF-8, plus 26 bytes for each log event" (API reference, PutLogEvents).
LOG_EVENT_BYTES, LOG_EVENT_OVERHEAD = 262_144, 26


@pytest.mark.parametrize("over", [0, 1])
def test_a_record_is_split_where_its_line_would_pass_one_log_event(over):
    """GIVEN two metrics whose record's line, with its properties, is exactly one log event (26 bytes of
    overhead counted) or one byte more WHEN emitted THEN one line of exactly 262,118 bytes, or two
    lines that each fit and together carry every value once."""
    s = Settings(instance_name="i")
    metrics = [(LATENESS_MS, "Milliseconds", [1, 2, 3]), (REJECTED_ROWS, "Count", 4)]

    def lines(pad: int) -> list[str]:
        buf = io.StringIO()
        obs.set_stream(buf)
        try:
            obs.metrics(s, metrics, timestamp_ms=7, note="x" * pad)
        finally:
            obs.set_stream(None)
        return buf.getvalue().splitlines()

    (bare,) = lines(0)
    room = LOG_EVENT_BYTES - LOG_EVENT_OVERHEAD - len(bare.encode("utf-8"))
    out = lines(room + over)
    sizes = [len(line.encode("utf-8")) for line in out]
    assert sizes == [262_118] if not over else len(sizes) == 2
    assert all(len(line.encode("utf-8")) + LOG_EVENT_OVERHEAD <= LOG_EVENT_BYTES for line in out)
    records = [json.loads(line) for line in out]
    for rec in records:
        assert_valid_emf(rec)
    assert values_of(records, LATENESS_MS) == [1, 2, 3] and values_of(records, REJECTED_ROWS) == [4]


def test_one_metrics_values_are_halved_until_each_record_fits():
    """A single metric whose values cannot share one log event with the properties: its values are
    split; a single value that cannot fit is an error (nothing could carry it)."""
    pad = "x" * (LOG_EVENT_BYTES - 600)  # room for the directive and ~60 of the 100 six-byte values
    values = list(range(10_000, 10_100))
    records = obs.emf_records("N", {"Instance": "x"}, [("M", "Count", values)], 1, {"note": pad})
    assert len(records) == 2
    assert all(len(obs.emf_line(r).encode("utf-8")) + LOG_EVENT_OVERHEAD <= LOG_EVENT_BYTES for r in records)
    assert values_of(records, "M") == values
    with pytest.raises(ValueError, match="does not fit one log event"):
        obs.emf_records("N", {"Instance": "x"}, [("M", "Count", 1)], 1, {"note": "x" * LOG_EVENT_BYTES})


def test_a_log_line_and_its_metrics_share_one_line_and_the_line_stands_alone_without_values(emitted, threshold):
    s = Settings(instance_name="i")
    obs.log_with_metrics("INFO", "batch done", s, [(LATENESS_MS, "Milliseconds", [5, 6])], 9, records=2)
    obs.log_with_metrics("INFO", "batch done", s, [(LATENESS_MS, "Milliseconds", [])], 9, records=0)
    threshold("WARNING")
    obs.log_with_metrics("INFO", "batch done", s, [(LATENESS_MS, "Milliseconds", [])], 9, records=0)
    obs.log_with_metrics("INFO", "batch done", s, [(LATENESS_MS, "Milliseconds", [7])], 9, records=1)
    with_values, alone, metric_at_warning = emitted()
    assert (with_values["message"], with_values["level"], with_values["records"]) == ("batch done", "INFO", 2)
    assert with_values[LATENESS_MS] == [5, 6] and with_values["_aws"]["Timestamp"] == 9
    assert alone == {"level": "INFO", "message": "batch done", "records": 0}
    # a metric record is always written, whatever the threshold; the line alone is not
    assert metric_at_warning[LATENESS_MS] == [7] and metric_at_warning["records"] == 1


def test_an_empty_value_array_emits_nothing(emitted):
    obs.metric(Settings(), LATENESS_MS, [], unit="Milliseconds")
    assert emitted() == []


# -- levels, threshold, tracebacks -----------------------------------------------------------------

@pytest.fixture
def threshold():
    yield obs.set_level
    obs.set_level(obs.DEFAULT_LEVEL)


def test_lines_below_the_threshold_are_not_written_and_metrics_always_are(emitted, threshold):
    threshold("WARNING")
    for level in ("DEBUG", "INFO", "WARNING", "ERROR"):
        obs.log(level, level.lower())
    obs.metric(Settings(), REJECTED_ROWS, 1)
    out = emitted()
    assert [rec.get("level") for rec in out] == ["WARNING", "ERROR", None]
    threshold("DEBUG")
    obs.log("DEBUG", "now seen")
    assert emitted()[-1]["message"] == "now seen"


def test_the_default_threshold_is_info_and_an_unknown_level_is_refused(emitted):
    obs.log("DEBUG", "hidden")
    obs.log("INFO", "shown")
    assert [rec["message"] for rec in emitted()] == ["shown"]
    with pytest.raises(ValueError, match="DEBUG, INFO, WARNING, ERROR"):
        obs.set_level("WARN")
    with pytest.raises(ValueError, match="log level"):
        Settings(log_level="verbose")


def test_every_level_the_code_logs_at_is_one_of_the_four():
    """One convention ("WARNING", never "WARN"): every obs.log call in the package names a level of LEVELS."""
    import re
    from pathlib import Path

    root = Path(obs.__file__).resolve().parents[1]
    used = {m for path in root.rglob("*.py") for m in re.findall(r'\blog\(\s*"([A-Z]+)"', path.read_text())}
    assert used and used <= set(obs.LEVELS), used - set(obs.LEVELS)


def test_an_unexpected_error_is_logged_with_its_traceback(emitted):
    def failing_step():
        raise KeyError("payload")

    try:
        failing_step()
    except KeyError as exc:
        obs.log("ERROR", "delivery group failed", exc=exc, message_ids=["m1"])
    (rec,) = emitted()
    assert rec["error"] == "KeyError: 'payload'" and rec["message_ids"] == ["m1"]
    assert "Traceback (most recent call last)" in rec["traceback"] and "failing_step" in rec["traceback"]
