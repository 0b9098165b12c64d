"""Event source mapping ``FilterCriteria``: the EventBridge pattern subset Lambda applies to records.

A record is passed to the function when it matches any of the mapping's patterns; filtered-out
records count as processed (Lambda drops them). SQS record bodies are matched as JSON when they
parse as JSON (``{"body": {...}}`` patterns), as Lambda does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

_MISSING = object()


def _numeric(rule: list[Any], value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    ops = {"<": float.__lt__, "<=": float.__le__, "=": float.__eq__, ">": float.__gt__, ">=": float.__ge__}
    for i in range(0, len(rule) - 1, 2):
        op, bound = rule[i], rule[i + 1]
        if op not in ops or not ops[op](float(value), float(bound)):
            return False
    return True


def _one(rule: Any, value: Any) -> bool:
    """One element of a pattern's value list against one value (``_MISSING`` when absent)."""
    if isinstance(rule, dict):
        (op, arg), = rule.items()
        if op == "exists":
            return (value is not _MISSING) == bool(arg)
        if value is _MISSING:
            return False
        if op == "prefix":
            return isinstance(value, str) and value.startswith(arg)
        if op == "suffix":
            return isinstance(value, str) and value.endswith(arg)
        if op == "equals-ignore-case":
            return isinstance(value, str) and value.lower() == str(arg).lower()
        if op == "anything-but":
            if isinstance(arg, dict):
                return not _one(arg, value)
            excluded = arg if isinstance(arg, list) else [arg]
            return value not in excluded
        if op == "numeric":
            return _numeric(arg, value)
        raise ValueError(f"filter operator {op!r} is not supported locally")
    return value is not _MISSING and value == rule


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    for key, rule in pattern.items():
        value = event.get(key, _MISSING)
        if isinstance(rule, dict):
            # Lambda matches the event's flattened leaf paths: under an absent or non-object value
            # every leaf is absent, which only ``{"exists": false}`` accepts.
            if not matches(rule, value if isinstance(value, dict) else {}):
                return False
            continue
        rules = rule if isinstance(rule, list) else [rule]
        values = value if isinstance(value, list) and value else [value]
        if not any(_one(r, v) for r in rules for v in values):
            return False
    return True


def sqs_view(record: dict[str, Any]) -> dict[str, Any]:
    """The record as filters see it: the body parsed when it is JSON."""
    try:
        body = json.loads(record.get("body", ""))
    except ValueError:
        return record
    return {**record, "body": body}


def passes(patterns: Sequence[dict[str, Any]], record: dict[str, Any]) -> bool:
    """Whether Lambda hands ``record`` to the function: no patterns, or one of them matches."""
    return not patterns or any(matches(p, record) for p in patterns)
