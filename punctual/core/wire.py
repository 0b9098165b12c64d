"""The one wire serializer: compact, deterministic JSON with exact numbers.

Every message Punctual sends is written by :func:`dumps`: no spaces, keys sorted, non-ASCII kept
as UTF-8. A :class:`decimal.Decimal` (what ``ddbjson.to_plain`` gives for a non-integral number,
docs/architecture.md "Payload fidelity") is written as a JSON number with all its digits
(``3.1415926535897932384626433832795028841``), never rounded through a float nor quoted.

The standard library cannot write a raw number (its encoder calls ``float.__repr__`` and a
``default`` hook can only return another object to encode), so: a value without Decimals goes
through ``json.dumps`` (its C encoder: the text is the same as before Decimals existed), and only
a value holding one is written by :func:`_text`, which does what ``json.dumps`` does with the
same options and writes each Decimal as ``str(d)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

_OPTIONS: dict[str, Any] = {"separators": (",", ":"), "ensure_ascii": False, "sort_keys": True}
# json.dumps's string encoder for ensure_ascii=False (the C one when available)
_string: Callable[[str], str] = json.encoder.encode_basestring  # type: ignore[attr-defined]


class _HasDecimal(Exception):
    """Raised out of json.dumps when the value holds a Decimal: it needs :func:`_text`."""


def _refuse(value: Any) -> Any:
    if isinstance(value, Decimal):
        raise _HasDecimal
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(obj: Any) -> str:
    """Compact, deterministic JSON (the wire format for every message we send); Decimals exact."""
    try:
        return json.dumps(obj, default=_refuse, **_OPTIONS)
    except _HasDecimal:
        return _text(obj)


def number_text(value: Decimal) -> str:
    """A Decimal as a JSON number with all its digits (``str`` gives JSON's grammar: ``1E+40``,
    ``-0.5``, ``1.50``); NaN and infinities have no JSON form."""
    if not value.is_finite():
        raise ValueError(f"Out of range decimal values are not JSON compliant: {value!r}")
    return str(value)


def _key(key: Any) -> str:
    """A map key as json.dumps writes it (it converts these scalar keys to strings)."""
    if isinstance(key, str):
        return key
    if isinstance(key, Decimal):
        return number_text(key)
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _map(value: dict[Any, Any]) -> str:
    return "{" + ",".join([_string(_key(k)) + ":" + _text(v) for k, v in sorted(value.items())]) + "}"


def _array(value: list[Any] | tuple[Any, ...]) -> str:
    return "[" + ",".join(map(_text, value)) + "]"


# by exact type: a dict lookup per value is the fast path (subclasses take the isinstance path)
_BY_TYPE: dict[type, Callable[[Any], str]] = {
    str: _string, int: int.__repr__, Decimal: number_text, dict: _map, list: _array, tuple: _array,
    bool: lambda b: "true" if b else "false", type(None): lambda _: "null",
}


def _text(value: Any) -> str:
    """The JSON text of ``value``: json.dumps(value, **_OPTIONS), Decimals exact."""
    write = _BY_TYPE.get(type(value))
    if write is not None:
        return write(value)
    if isinstance(value, Decimal):
        return number_text(value)
    if isinstance(value, dict):
        return _map(value)
    if isinstance(value, (list, tuple)):
        return _array(value)
    return json.dumps(value, **_OPTIONS)  # floats, and what json knows (or refuses) as it does
