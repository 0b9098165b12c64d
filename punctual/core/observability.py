"""Structured JSON logs and CloudWatch Embedded Metric Format (no API calls).

Payloads are data: they are never logged unless ``log_payloads`` is on.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from .metrics_names import INSTANCE_DIMENSION

if TYPE_CHECKING:
    from .config import Settings

_out: TextIO | None = None


def set_stream(stream: TextIO | None) -> None:
    """Redirect log output (tests, the local stack)."""
    global _out
    _out = stream


def _write(line: str) -> None:
    print(line, file=_out or sys.stdout, flush=True)


def log(level: str, message: str, **fields: Any) -> None:
    record = {"level": level, "message": message, **fields}
    _write(json.dumps(record, default=str, separators=(",", ":")))


def metric(
    settings: Settings,
    name: str,
    value: float | list[float],
    unit: str = "Count",
    timestamp_ms: int | None = None,
    **properties: Any,
) -> None:
    """Emit one EMF record: CloudWatch extracts the metric from the log line.

    Namespace and dimensions come from ``settings``: every metric carries exactly the dimension
    ``{INSTANCE_DIMENSION: settings.instance_name}``, the one the construct's ``Scheduler.metric``
    reads (a CloudWatch metric is identified by its namespace, name and full set of dimensions,
    so an extra dimension here would make a metric the construct's alarms never see).
    ``properties`` are logged with the record but are not dimensions.
    """
    dims = {INSTANCE_DIMENSION: settings.instance_name}
    record = {
        **properties,
        "_aws": {
            "Timestamp": timestamp_ms if timestamp_ms is not None else int(time.time() * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": settings.metrics_namespace,
                    "Dimensions": [sorted(dims)],
                    "Metrics": [{"Name": name, "Unit": unit}],
                }
            ],
        },
        name: value,
        **dims,
    }
    _write(json.dumps(record, default=str, separators=(",", ":")))
