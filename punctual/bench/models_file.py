"""``punctual bench --models FILE``: model overrides from a JSON file (what ``punctual calibrate`` writes from an
account's own measurements), validated, each error one line naming where it is.

The format (docs/benchmark.md, "A models file")::

    {"source": "what the figures are (optional)",
     "models": {"sqs_poll_latency_ms": {"quantiles": {"0.5": 18, "0.9": 41, "0.99": 130}, "source": "..."},
                "cold_start_ms": {"lognormal": {"0.5": 320, "0.99": 1100}, "cap": 10000},
                "stream_latency_ms": {"samples": [120, 131, 190]},
                "rule_target_delay_ms": [50, 1500],
                "warm_idle_ms": 300000, "esm_scale_per_minute": 60},
     "pessimistic": {...the same shape: the pessimistic reading's values only...}}

A distribution is a number (fixed), ``[lo, hi]`` or ``{"uniform": [lo, hi]}`` (whole ms), ``{"lognormal":
{probability: ms}}`` (a shifted log-normal fitted to 2 or more quantiles, optional ``"cap"``), ``{"quantiles":
{probability: ms}}`` (measured quantiles, interpolated; a log-normal tail past the last unless it is p = 1) or
``{"samples": [ms, ...]}`` (measured values, drawn from). Any of them may carry ``"source"`` (shown in the
report). Other parameters take their type: a number, a list of whole ms (``async_retry_delays_ms``), an object
of ``[lo, hi]`` per service (``api_latency_ms``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .distributions import Dist, Empirical, Samples, Uniform, fit_lognormal
from .models import Models, as_dist

FAMILIES = ("uniform", "lognormal", "quantiles", "samples")
SECTIONS = ("source", "models", "pessimistic")


class ModelsFileError(ValueError):
    """A models file that cannot be used: the message says where and why, on one line."""


@dataclass
class ModelsFile:
    """A models file read: the overrides of every reading, those of the pessimistic reading only, and the
    source of each parameter the file gives (shown in the report)."""

    models: dict[str, Any] = field(default_factory=dict)
    pessimistic: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


def load(path: str | Path) -> ModelsFile:
    """Read and validate ``path``; a bad file raises SystemExit with one line: ``--models PATH: where: what``."""
    try:
        return parse(json.loads(Path(path).read_text()), str(path))
    except OSError as exc:
        raise SystemExit(f"--models {path}: cannot read it ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--models {path}: not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except ModelsFileError as exc:
        raise SystemExit(f"--models {path}: {exc}") from None


def parse(doc: Any, name: str = "models file") -> ModelsFile:
    if not isinstance(doc, dict):
        raise ModelsFileError(f"the file must hold a JSON object with {', '.join(map(repr, SECTIONS))}")
    unknown = sorted(set(doc) - set(SECTIONS))
    if unknown:
        raise ModelsFileError(f"unknown key {unknown[0]!r}; a models file has {', '.join(map(repr, SECTIONS))}")
    if "models" not in doc and "pessimistic" not in doc:
        raise ModelsFileError("nothing to override: give \"models\" (every reading) or \"pessimistic\"")
    out = ModelsFile()
    source = doc.get("source")
    if source is not None and not isinstance(source, str):
        raise ModelsFileError("source: a string")
    for section in ("models", "pessimistic"):
        given = doc.get(section, {})
        if not isinstance(given, dict):
            raise ModelsFileError(f"{section}: an object of parameter -> value")
        target = out.models if section == "models" else out.pessimistic
        for param, raw in given.items():
            where = f"{section}.{param}"
            target[param] = _value(param, raw, where)
            if section == "models":
                out.sources[param] = _source(raw, where) or source or f"{name} (no source given)"
    return out


_KINDS = {f.name: f.type for f in fields(Models)}


def _value(param: str, raw: Any, where: str) -> Any:
    kind = _KINDS.get(param)
    if kind is None:
        raise ModelsFileError(f"{where}: unknown model parameter; known: {', '.join(sorted(_KINDS))}")
    if kind == "Dist":
        return _dist(raw, where)
    default = getattr(Models(), param)
    if isinstance(default, bool) or not isinstance(default, int | float | tuple | dict):
        raise ModelsFileError(f"{where}: cannot be set from a models file")
    if isinstance(default, dict):
        return _ranges(raw, default, where)
    if isinstance(default, tuple):
        if not isinstance(raw, list) or not all(_whole(v) and v >= 0 for v in raw):
            raise ModelsFileError(f"{where}: a list of whole ms, got {raw!r}")
        return tuple(raw)
    if not _number(raw) or raw < 0 or (isinstance(default, int) and not _whole(raw)):
        kind_name = "a whole number" if isinstance(default, int) else "a number"
        raise ModelsFileError(f"{where}: {kind_name} >= 0, got {raw!r}")
    return type(default)(raw)


def _ranges(raw: Any, default: dict[str, tuple[int, int]], where: str) -> dict[str, tuple[int, int]]:
    if not isinstance(raw, dict):
        raise ModelsFileError(f"{where}: an object of service -> [lo, hi] ms ({', '.join(default)})")
    out = dict(default)
    for service, pair in raw.items():
        if service not in default:
            raise ModelsFileError(f"{where}.{service}: unknown service; known: {', '.join(default)}")
        out[service] = _pair(pair, f"{where}.{service}")
    return out


def _dist(raw: Any, where: str) -> Dist:
    if _number(raw) or isinstance(raw, list):
        if isinstance(raw, list):
            _pair(raw, where)
        elif not _whole(raw) or raw < 0:
            raise ModelsFileError(f"{where}: a fixed value is whole ms >= 0, got {raw!r}")
        try:
            return as_dist(int(raw) if _number(raw) else raw, where)
        except ValueError as exc:
            raise ModelsFileError(str(exc)) from None
    if not isinstance(raw, dict):
        raise ModelsFileError(f"{where}: a number (fixed ms), [lo, hi] or an object with one of "
                              f"{', '.join(map(repr, FAMILIES))}, got {raw!r}")
    families = [k for k in raw if k in FAMILIES]
    extra = sorted(set(raw) - set(FAMILIES) - {"source", "cap"})
    if len(families) != 1 or extra:
        raise ModelsFileError(f"{where}: one family among {', '.join(map(repr, FAMILIES))} (and optionally "
                              f"'source', 'cap'), got keys {sorted(raw)}")
    family = families[0]
    if "cap" in raw and family != "lognormal":
        raise ModelsFileError(f"{where}: 'cap' applies to 'lognormal' only")
    body = raw[family]
    if family == "uniform":
        lo, hi = _pair(body, f"{where}.uniform")
        return Uniform(lo, hi)
    if family == "samples":
        if not isinstance(body, list) or not body or not all(_number(v) and v >= 0 for v in body):
            raise ModelsFileError(f"{where}.samples: a non-empty list of ms >= 0")
        return Samples(tuple(int(round(v)) for v in body))
    points = _quantiles(body, f"{where}.{family}")
    if family == "quantiles":
        return Empirical(points)
    cap = raw.get("cap")
    if cap is not None and (not _whole(cap) or cap <= 0):
        raise ModelsFileError(f"{where}.cap: a whole number of ms > 0, got {cap!r}")
    try:
        return fit_lognormal(dict(points), cap).dist
    except ValueError as exc:
        raise ModelsFileError(f"{where}.lognormal: {exc}") from None


def _quantiles(body: Any, where: str) -> tuple[tuple[float, float], ...]:
    if not isinstance(body, dict) or not body:
        raise ModelsFileError(f"{where}: an object of probability -> ms, e.g. {{\"0.5\": 16, \"0.99\": 105}}")
    points: list[tuple[float, float]] = []
    for key, value in body.items():
        try:
            p = float(key)
        except ValueError:
            raise ModelsFileError(f"{where}: {key!r} is not a probability (0 to 1)") from None
        if not 0 <= p <= 1:
            raise ModelsFileError(f"{where}: {key!r} is not a probability (0 to 1)")
        if not _number(value) or value < 0:
            raise ModelsFileError(f"{where}.{key}: ms >= 0, got {value!r}")
        points.append((p, float(value)))
    points.sort()
    for (p0, x0), (p1, x1) in zip(points, points[1:], strict=False):
        if x1 < x0:
            raise ModelsFileError(f"{where}: p{p1:g} ({x1:g} ms) below p{p0:g} ({x0:g} ms): quantiles never fall")
    return tuple(points)


def _pair(raw: Any, where: str) -> tuple[int, int]:
    if not (isinstance(raw, list) and len(raw) == 2 and all(_whole(v) for v in raw) and 0 <= raw[0] <= raw[1]):
        raise ModelsFileError(f"{where}: [lo, hi], whole ms with 0 <= lo <= hi, got {raw!r}")
    return int(raw[0]), int(raw[1])


def _source(raw: Any, where: str) -> str | None:
    source = raw.get("source") if isinstance(raw, dict) else None
    if source is not None and not isinstance(source, str):
        raise ModelsFileError(f"{where}.source: a string")
    return source


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _whole(v: Any) -> bool:
    return _number(v) and float(v).is_integer()
