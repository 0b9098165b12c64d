"""DynamoDB attribute-value JSON <-> plain JSON, without boto3.

Rows arrive as attribute values (``{"S": ".."}``, ``{"N": ".."}``...) from stream
images and low-level client calls; consumers get plain JSON. Numbers become int
when integral, else :class:`decimal.Decimal` with every digit of the row's text (DynamoDB keeps
38; a float keeps ~17); sets become sorted lists; binary becomes base64 text.
"""

from __future__ import annotations

import base64
import math
from decimal import Decimal, InvalidOperation
from typing import Any


class UnsupportedValue(ValueError):
    """A value that has no faithful plain-JSON (or DynamoDB) form."""


def _number(text: str) -> int | Decimal:
    """A number attribute's text as an exact number: int when integral, else Decimal."""
    try:
        d = Decimal(text)
    except InvalidOperation as exc:
        raise UnsupportedValue(f"not a number: {text!r}") from exc
    if not d.is_finite():
        raise UnsupportedValue(f"non-finite number: {text!r}")
    if d == d.to_integral_value() and "e" not in text.lower() and "." not in text:
        return int(d)
    if math.isinf(float(d)):
        # beyond DynamoDB's range (1E+126) too; a JSON reader would make it infinity
        raise UnsupportedValue(f"number out of float range: {text!r}")
    if d == d.to_integral_value() and abs(d) <= Decimal(2) ** 53:
        # "2.0", "1E+3": written as before, an integer; "1E+40" stays a Decimal (its text is short)
        return int(d)
    return d


def to_plain(av: Any) -> Any:
    """Convert one attribute value (``{"M": {...}}`` etc.) to plain JSON."""
    if not isinstance(av, dict) or len(av) != 1:
        raise UnsupportedValue(f"not an attribute value: {av!r:.80}")
    (tag, val), = av.items()
    if tag == "S":
        return val
    if tag == "N":
        return _number(val)
    if tag == "BOOL":
        return bool(val)
    if tag == "NULL":
        return None
    if tag == "M":
        return {k: to_plain(v) for k, v in val.items()}
    if tag == "L":
        return [to_plain(v) for v in val]
    if tag == "B":
        return _b64(val)
    if tag == "SS":
        return sorted(val)
    if tag == "NS":
        return sorted(_number(v) for v in val)
    if tag == "BS":
        return sorted(_b64(v) for v in val)
    raise UnsupportedValue(f"unknown attribute type {tag!r}")


def _b64(val: Any) -> str:
    if isinstance(val, (bytes, bytearray)):
        return base64.b64encode(bytes(val)).decode("ascii")
    return str(val)  # stream records already carry base64 text


def item_to_plain(item: dict[str, Any]) -> dict[str, Any]:
    return {k: to_plain(v) for k, v in item.items()}


def from_plain(value: Any) -> dict[str, Any]:
    """Plain JSON -> attribute value (what the client writes)."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int):
        return {"N": str(value)}
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnsupportedValue(f"non-finite number {value!r} cannot be stored")
        return {"N": repr(value)}
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise UnsupportedValue(f"non-finite number {value!r} cannot be stored")
        return {"N": str(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, (bytes, bytearray)):
        return {"B": bytes(value)}
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise UnsupportedValue(f"map keys must be strings, got {type(k).__name__}")
        return {"M": {k: from_plain(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"L": [from_plain(v) for v in value]}
    raise UnsupportedValue(f"cannot store a {type(value).__name__}")
