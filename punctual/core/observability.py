"""Structured JSON logs and CloudWatch Embedded Metric Format (no API calls).

Payloads are data: they are never logged unless ``log_payloads`` is on.

Every line written during a Lambda invocation carries its ``request_id`` and ``cold_start``
(bound by :func:`start_invocation`, which each handler calls first through
:func:`punctual.core.runtime.start_invocation`: the execution environment knows whether it is new).
Lambda runs one invocation at a time per execution environment; the binding is a context variable,
so the poller's send workers (threads) log with it too and the local stack's concurrent functions
keep theirs apart.
Why our own lines rather than Lambda's JSON log format or Powertools Logger: docs/construct.md,
"Logs and metrics".

Levels are Python's names (``log_levels.LEVELS``); lines below the threshold (``PUNCTUAL_LOG_LEVEL``,
:func:`set_level`) are not written. Metric records are always written, split to stay within the
EMF specification's limits and CloudWatch Logs' size of one log event (:func:`emf_records`).
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
# CloudWatch Logs' PutLogEvents: "Each log event can be no larger than 256 KB", and a batch's size is
# "the sum of all event messages in UTF-8, plus 26 bytes for each log event" (CloudWatch Logs API
# reference, PutLogEvents). A record's line is kept to 262,144 bytes with those 26 counted, the
# reading that holds whichever way the limit counts them (the newline is not part of the event).
LOG_EVENT_MAX_BYTES = 262_144
LOG_EVENT_OVERHEAD_BYTES = 26
# What every line of the current invocation carries (request_id, cold_start). A context variable:
# the send workers of parallel.pmap inherit it, and the local stack's functions (threads of one
# process) each keep their own.
_invocation: ContextVar[dict[str, Any] | None] = ContextVar("punctual_log_invocation", default=None)


def set_stream(stream: LogStream | None) -> None:
    """Redirect log output (tests, the local stack)."""
    global _out
    _out = stream


def _write(line: str) -> None:
    print(line, file=_out or sys.stdout, flush=True)


def start_invocation(context: Any, cold_start: bool) -> dict[str, Any]:
    """Bind the Lambda ``context``'s request id and ``cold_start`` (the first invocation of its
    execution environment) to every line until the next call. Returns the binding. ``context`` may
    be None (a test calling the handler): no request id."""
    request_id = getattr(context, "aws_request_id", None)
    binding: dict[str, Any] = {}
    if request_id:
        binding["request_id"] = str(request_id)
    binding["cold_start"] = bool(cold_start)
    _invocation.set(binding)
    return dict(binding)


def cold_start() -> bool:
    """Whether the current invocation is its execution environment's first (False when none is
    bound: a use case called without a handler)."""
    return bool((_invocation.get() or {}).get("cold_start"))


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


_Values = tuple[str, str, "float | list[float]"]  # (name, unit, a value or up to EMF_MAX_VALUES of them)


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
    error); and each record's line (:func:`emf_line`) fits one CloudWatch Logs event
    (:func:`fits_log_event`: a record over it is split in two, its metrics or else its values, until
    each fits; a single value that cannot fit with the properties is an error). A metric with no
    values is left out. ``properties`` ride along on every record without overriding a metric, a
    dimension or ``_aws``. Pure: no I/O."""
    if len(dimensions) > EMF_MAX_DIMENSIONS:
        raise ValueError(f"an EMF dimension set has at most {EMF_MAX_DIMENSIONS} keys, got {len(dimensions)}")
    names = [name for name, _, _ in metrics]
    if len(set(names)) != len(names) or set(names) & set(dimensions):
        raise ValueError(f"metric names must be distinct and not dimensions: {names}")
    slices: list[list[_Values]] = []
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

    def record(batch: list[_Values]) -> dict[str, Any]:
        return {
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
        }

    return [rec for part in slices for i in range(0, len(part), EMF_MAX_METRICS)
            for rec in _sized(part[i:i + EMF_MAX_METRICS], record)]


def emf_line(record: Mapping[str, Any]) -> str:
    """A record as the line written (:func:`metrics`)."""
    return json.dumps(record, default=str, separators=(",", ":"))


def fits_log_event(line: str) -> bool:
    """Whether ``line`` fits one CloudWatch Logs event, its overhead counted (:data:`LOG_EVENT_MAX_BYTES`)."""
    return len(line.encode("utf-8")) + LOG_EVENT_OVERHEAD_BYTES <= LOG_EVENT_MAX_BYTES


def _sized(batch: list[_Values], record: Any) -> list[dict[str, Any]]:
    """``record(batch)``, or, when its line does not fit one log event, the records of its halves: by
    metrics, or for a single metric by values."""
    rec = record(batch)
    if fits_log_event(emf_line(rec)):
        return [rec]
    if len(batch) > 1:
        half = len(batch) // 2
        return _sized(batch[:half], record) + _sized(batch[half:], record)
    name, unit, value = batch[0]
    if not isinstance(value, list) or len(value) < 2:
        raise ValueError(f"an EMF record of metric {name} does not fit one log event ({LOG_EVENT_MAX_BYTES} bytes)")
    half = len(value) // 2
    return _sized([(name, unit, value[:half])], record) + _sized([(name, unit, value[half:])], record)


def log_with_metrics(
    level: Level,
    message: str,
    settings: Settings,
    values: Sequence[tuple[str, str, float | Sequence[float]]],
    timestamp_ms: int | None = None,
    **fields: Any,
) -> None:
    """A log line and the metrics of the same moment in one line: the metrics' EMF record carrying the
    message and its fields as properties (written whatever the threshold, as every metric record), or
    the log line alone when no metric has a value. A line's fixed bytes (the invocation's binding, the
    EMF directive) are then paid once (docs/benchmark.md, "Cost floors")."""
    if any(isinstance(value, int | float) or len(value) for _, _, value in values):
        metrics(settings, values, timestamp_ms, level=level, message=message, **fields)
    else:
        log(level, message, **fields)


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
        _write(emf_line(record))
