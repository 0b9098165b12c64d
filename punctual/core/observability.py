"""Structured JSON logs and CloudWatch Embedded Metric Format (no API calls).

Payloads are data: they are never logged unless ``log_payloads`` is on.

Every line written during a Lambda invocation carries its ``request_id`` and ``cold_start``
(bound by :func:`start_invocation`, which each handler calls first). Lambda runs one invocation
at a time per execution environment; the binding is a context variable, so the poller's send
workers (threads) log with it too and the local stack's concurrent functions keep theirs apart.
Why our own lines rather than Lambda's JSON log format or Powertools Logger: docs/construct.md,
"Logs and metrics".

Levels are Python's names (``log_levels.LEVELS``); lines below the threshold (``PUNCTUAL_LOG_LEVEL``,
:func:`set_level`) are not written. Metric records are always written, split to stay within the
EMF specification's limits (:func:`emf_records`).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from .log_levels import DEFAULT_LEVEL, LEVELS, Level, check_level
from .metrics_names import INSTANCE_DIMENSION

if TYPE_CHECKING:
    from .config import Settings


class LogStream(Protocol):
    """Where log lines go: a text file, or anything with ``write`` and ``flush`` (print's needs)."""

    def write(self, s: str, /) -> object: ...
    def flush(self) -> object: ...


_out: LogStream | None = None

_threshold = LEVELS[DEFAULT_LEVEL]
# At most this much of a traceback is logged (the frames nearest the error are kept).
MAX_TRACEBACK_CHARS = 8000

# CloudWatch EMF specification ("Specification: Embedded metric format", document structure;
# the same numbers as AWS's EMF libraries, e.g. aws-embedded-metrics-node src/Constants.ts):
EMF_MAX_VALUES = 100  # values of one metric in one record (a longer array is not extracted)
EMF_MAX_METRICS = 100  # MetricDefinition objects in one directive
EMF_MAX_DIMENSIONS = 30  # dimension keys in one DimensionSet
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


def set_level(level: str) -> None:
    """Write only lines at ``level`` or above (one of ``log_levels.LEVELS``; ``Settings.log_level``)."""
    global _threshold
    _threshold = LEVELS[check_level(level)]


def error_text(exc: BaseException, limit: int = 200) -> str:
    """An error as a log field: "Type: message", the message cut to ``limit`` characters."""
    return f"{type(exc).__name__}: {str(exc)[:limit]}"


def log(level: Level, message: str, exc: BaseException | None = None, **fields: Any) -> None:
    """One JSON line with the invocation's binding (fields cannot override it), if ``level`` is at or
    above the threshold. ``exc``: an unexpected error, logged as ``error`` ("Type: message") and
    ``traceback`` (its formatted frames, the last :data:`MAX_TRACEBACK_CHARS`)."""
    if LEVELS.get(level, LEVELS["ERROR"]) < _threshold:
        return
    if exc is not None:
        fields["error"] = error_text(exc, 300)
        fields["traceback"] = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:]
    record = {"level": level, "message": message, **fields, **(_invocation.get() or {})}
    _write(json.dumps(record, default=str, separators=(",", ":")))


def emf_records(
    namespace: str,
    dimensions: Mapping[str, str],
    metrics: Sequence[tuple[str, str, float | Sequence[float]]],
    timestamp_ms: int,
    properties: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The EMF records that carry ``metrics`` = (name, unit, value or values), each within the
    specification's limits: at most :data:`EMF_MAX_VALUES` values per metric and
    :data:`EMF_MAX_METRICS` metrics per record (record k carries the k-th slice of every metric
    that has one); one dimension set of at most :data:`EMF_MAX_DIMENSIONS` keys (more is an
    error). A metric with no values is left out. ``properties`` ride along on every record
    without overriding a metric, a dimension or ``_aws``. Pure: no I/O."""
    if len(dimensions) > EMF_MAX_DIMENSIONS:
        raise ValueError(f"an EMF dimension set has at most {EMF_MAX_DIMENSIONS} keys, got {len(dimensions)}")
    names = [name for name, _, _ in metrics]
    if len(set(names)) != len(names) or set(names) & set(dimensions):
        raise ValueError(f"metric names must be distinct and not dimensions: {names}")
    slices: list[list[tuple[str, str, float | list[float]]]] = []
    for name, unit, value in metrics:
        if isinstance(value, int | float):
            chunks: list[float | list[float]] = [value]
        else:
            values = list(value)
            chunks = [values[i:i + EMF_MAX_VALUES] for i in range(0, len(values), EMF_MAX_VALUES)]
        for k, chunk in enumerate(chunks):
            if k == len(slices):
                slices.append([])
            slices[k].append((name, unit, chunk))
    records = []
    for part in slices:
        for i in range(0, len(part), EMF_MAX_METRICS):
            batch = part[i:i + EMF_MAX_METRICS]
            records.append({
                **(properties or {}),
                "_aws": {
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": namespace,
                        "Dimensions": [sorted(dimensions)],
                        "Metrics": [{"Name": name, "Unit": unit} for name, unit, _ in batch],
                    }],
                },
                **{name: value for name, _, value in batch},
                **dimensions,
            })
    return records


def metric(
    settings: Settings,
    name: str,
    value: float | Sequence[float],
    unit: str = "Count",
    timestamp_ms: int | None = None,
    **properties: Any,
) -> None:
    """Emit one metric as EMF records (one, or one per :data:`EMF_MAX_VALUES` values): CloudWatch
    extracts the metric from the log lines. See :func:`metrics`."""
    metrics(settings, [(name, unit, value)], timestamp_ms, **properties)


def metrics(
    settings: Settings,
    values: Sequence[tuple[str, str, float | Sequence[float]]],
    timestamp_ms: int | None = None,
    **properties: Any,
) -> None:
    """Emit several metrics = (name, unit, value or values) in as few EMF records as the
    specification allows (usually one line: an invocation's metrics share it, so the log bytes
    are paid once; docs/benchmark.md, "Cost floors").

    Namespace and dimensions come from ``settings``: every metric carries exactly the dimension
    ``{INSTANCE_DIMENSION: settings.instance_name}``, the one the construct's ``Scheduler.metric``
    reads (a CloudWatch metric is identified by its namespace, name and full set of dimensions,
    so an extra dimension here would make a metric the construct's alarms never see).
    ``properties`` are logged with the record but are not dimensions.
    """
    for record in emf_records(
        settings.metrics_namespace,
        {INSTANCE_DIMENSION: settings.instance_name},
        values,
        timestamp_ms if timestamp_ms is not None else int(time.time() * 1000),
        {**properties, **(_invocation.get() or {})},
    ):
        _write(json.dumps(record, default=str, separators=(",", ":")))
