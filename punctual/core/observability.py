"""Structured JSON logs and CloudWatch Embedded Metric Format (no API calls).

Payloads are data: they are never logged unless ``log_payloads`` is on.

Every line written during a Lambda invocation carries its ``request_id`` and ``cold_start``
(bound by :func:`start_invocation`, which each handler calls first). Lambda runs one invocation
at a time per execution environment; the binding is a context variable, so the poller's send
workers (threads) log with it too and the local stack's concurrent functions keep theirs apart.
Why our own lines rather than Lambda's JSON log format or Powertools Logger: docs/construct.md,
"Logs and metrics".
"""

from __future__ import annotations

import json
import sys
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from .metrics_names import INSTANCE_DIMENSION

if TYPE_CHECKING:
    from .config import Settings


class LogStream(Protocol):
    """Where log lines go: a text file, or anything with ``write`` and ``flush`` (print's needs)."""

    def write(self, s: str, /) -> object: ...
    def flush(self) -> object: ...


_out: LogStream | None = None
# What every line of the current invocation carries (request_id, cold_start). A context variable:
# the send workers of parallel.pmap inherit it, and the local stack's functions (threads of one
# process) each keep their own.
_invocation: ContextVar[dict[str, Any] | None] = ContextVar("punctual_log_invocation", default=None)
# Functions that have already started an invocation in this process (cold_start is then false).
_warm: set[str] = set()


def set_stream(stream: LogStream | None) -> None:
    """Redirect log output (tests, the local stack)."""
    global _out
    _out = stream


def _write(line: str) -> None:
    print(line, file=_out or sys.stdout, flush=True)


def start_invocation(context: Any) -> dict[str, Any]:
    """Bind the Lambda ``context``'s request id and whether this is the first invocation of its
    function in this process (a cold start) to every line until the next call. Returns the binding.
    ``context`` may be None (a test calling the handler): no request id, cold_start as for any call."""
    function = str(getattr(context, "function_name", "") or "")
    request_id = getattr(context, "aws_request_id", None)
    binding: dict[str, Any] = {}
    if request_id:
        binding["request_id"] = str(request_id)
    binding["cold_start"] = function not in _warm
    _warm.add(function)
    _invocation.set(binding)
    return dict(binding)


def log(level: str, message: str, **fields: Any) -> None:
    """One JSON line with the invocation's binding (fields cannot override it)."""
    record = {"level": level, "message": message, **fields, **(_invocation.get() or {})}
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
        **(_invocation.get() or {}),
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
