"""The client CPU of an AWS call, charged to the function that makes it (issue 29).

botocore's own work per call (validate, serialise, sign, TLS, parse) is measured per call type and
size by bench/measure_client_cpu.py, which writes :mod:`punctual.bench.client_cpu_table` (ms at one
vCPU, ``base_ms + per_item_ms x items``). Lambda gives a function memory / 1,769 MB of a vCPU (one
vCPU at 1,769 MB, "Configuring function memory"), and a single Python thread never uses more than
one. The GIL serialises the threads of one invocation: calls made in parallel
(``punctual.core.parallel.pmap``) overlap their service latency but not their CPU, so the simulator
charges each call's CPU in full.

The request side (base, and the per-entry cost of batch requests) is charged before the call
reaches AWS, the per-row cost of a Query or BatchGetItem response after it returns.
"""

from __future__ import annotations

from typing import Any, cast

from .client_cpu_table import OPS

VCPU_MB = 1769  # Lambda: one vCPU at 1,769 MB, CPU in proportion to memory below it
SMALL_CALL = "dynamodb.UpdateItem"  # the cost of a call type the script does not measure
RESPONSE_SIZED = frozenset({"dynamodb.Query", "dynamodb.BatchGetItem"})  # per-item CPU: parsing the rows


def vcpu_share(memory_mb: int) -> float:
    return min(1.0, memory_mb / VCPU_MB)


def _cost(api: str) -> tuple[float, float]:
    entry = cast("dict[str, float]", OPS.get(api) or OPS[SMALL_CALL])
    return entry["base_ms"], entry["per_item_ms"]


def request_items(api: str, params: dict[str, Any]) -> int:
    """The entries a batch request carries (SQS batches, BatchWriteItem, TransactWriteItems); 0 for other calls."""
    if api in ("sqs.SendMessageBatch", "sqs.DeleteMessageBatch"):
        return len(params.get("Entries") or [])
    if api == "dynamodb.BatchWriteItem":
        return sum(len(v) for v in (params.get("RequestItems") or {}).values())
    if api == "dynamodb.TransactWriteItems":
        return len(params.get("TransactItems") or [])
    return 0


def response_items(api: str, parsed: dict[str, Any]) -> int:
    """The rows a Query or BatchGetItem response carries; 0 for other calls."""
    if api == "dynamodb.Query":
        return len(parsed.get("Items") or [])
    if api == "dynamodb.BatchGetItem":
        return sum(len(v) for v in (parsed.get("Responses") or {}).values())
    return 0


def cpu_ms(api: str, items: int, memory_mb: int, scale: float = 1.0, base: bool = True) -> float:
    """CPU ms of one call carrying ``items`` entries or rows, at ``memory_mb``; without its base when
    ``base`` is False (the rows of a response, charged after the call)."""
    fixed, per_item = _cost(api)
    return scale * ((fixed if base else 0.0) + per_item * items) / vcpu_share(memory_mb)


def request_cpu_ms(api: str, params: dict[str, Any], memory_mb: int, scale: float = 1.0) -> float:
    """CPU ms the function spends before the call reaches AWS."""
    items = 0 if api in RESPONSE_SIZED else request_items(api, params)
    return cpu_ms(api, items, memory_mb, scale)


def response_cpu_ms(api: str, parsed: dict[str, Any], memory_mb: int, scale: float = 1.0) -> float:
    """CPU ms the function spends parsing the rows of a response."""
    if api not in RESPONSE_SIZED:
        return 0.0
    return cpu_ms(api, response_items(api, parsed), memory_mb, scale, base=False)


def whole_ms(carry: float, ms: float) -> tuple[int, float]:
    """Virtual time moves in whole ms: the whole ms of ``carry + ms`` and the fraction left over."""
    total = carry + ms
    whole = int(total)
    return whole, total - whole
