"""EMF records: namespace and the Instance dimension come from the Settings, on every metric."""

from __future__ import annotations

import io
import json

import pytest

from punctual.core import observability as obs
from punctual.core.config import Settings
from punctual.core.metrics_names import INSTANCE_DIMENSION, LATENESS_MS, REJECTED_ROWS


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
