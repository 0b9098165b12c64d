"""EMF records: namespace and the Instance dimension come from the Settings, on every metric."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from punctual.core import observability as obs
from punctual.core.config import Settings
from punctual.core.metrics_names import INSTANCE_DIMENSION, LATENESS_MS, REJECTED_ROWS


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """No invocation bound and no function started yet, as in a new execution environment."""
    obs._invocation.set({})
    monkeypatch.setattr(obs, "_warm", set())


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
    ctx = SimpleNamespace(function_name="poller", aws_request_id="r1")
    assert obs.start_invocation(ctx) == {"request_id": "r1", "cold_start": True}
    obs.log("INFO", "one", request_id="forged", cold_start="forged")
    obs.metric(Settings(), REJECTED_ROWS, 1)
    obs.start_invocation(SimpleNamespace(function_name="poller", aws_request_id="r2"))
    obs.log("INFO", "two")
    first, metric, second = emitted()
    assert (first["request_id"], first["cold_start"], first["message"]) == ("r1", True, "one")
    assert (metric["request_id"], metric["cold_start"]) == ("r1", True)
    assert (second["request_id"], second["cold_start"]) == ("r2", False)


def test_cold_start_is_per_function_and_a_context_may_be_missing(emitted):
    """The local stack runs the three functions in one process: each has its own first invocation."""
    assert obs.start_invocation(SimpleNamespace(function_name="poller", aws_request_id="a"))["cold_start"]
    assert obs.start_invocation(SimpleNamespace(function_name="editor", aws_request_id="b"))["cold_start"]
    assert obs.start_invocation(None) == {"cold_start": True}
    obs.log("INFO", "no context")
    (rec,) = emitted()
    assert "request_id" not in rec and rec["cold_start"] is True
