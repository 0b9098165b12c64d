"""Structured JSON logs and CloudWatch Embedded Metric Format (no API calls).

Payloads are data: they are never logged unless ``log_payloads`` is on.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

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
    namespace: str,
    name: str,
    value: float | list[float],
    unit: str = "Count",
    dimensions: Mapping[str, str] | None = None,
    timestamp_ms: int | None = None,
    **properties: Any,
) -> None:
    """Emit one EMF record: CloudWatch extracts the metric from the log line."""
    dims = dict(dimensions or {})
    record = {
        "_aws": {
            "Timestamp": timestamp_ms if timestamp_ms is not None else int(time.time() * 1000),
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    "Dimensions": [sorted(dims)],
                    "Metrics": [{"Name": name, "Unit": unit}],
                }
            ],
        },
        name: value,
        **dims,
        **properties,
    }
    _write(json.dumps(record, default=str, separators=(",", ":")))
