"""Stand-in consumer and editor modules for driver tests: they record what they are given."""

from __future__ import annotations

import threading
from typing import Any

CALLS: list[tuple[str, dict[str, Any]]] = []
FAIL_IDS: set[str] = set()  # message ids / sequence numbers to report as failed (once each)
_lock = threading.Lock()


def consume(event: dict[str, Any], deps: Any) -> dict[str, Any]:
    with _lock:
        CALLS.append(("consume", event))
        failed = [r["messageId"] for r in event["Records"] if r["body"] in FAIL_IDS]
    return {"batchItemFailures": [{"itemIdentifier": i} for i in failed]}


def process_stream(event: dict[str, Any], deps: Any) -> dict[str, Any]:
    with _lock:
        CALLS.append(("stream", event))
        failed = []
        for r in event["Records"]:
            seq = r["dynamodb"]["SequenceNumber"]
            sk = r["dynamodb"]["Keys"]["sk"]["S"]
            if sk in FAIL_IDS:
                FAIL_IDS.discard(sk)
                failed.append(seq)
    return {"batchItemFailures": [{"itemIdentifier": s} for s in failed]}


def handler(event: dict[str, Any], context: Any) -> None:  # never used: the inner functions are
    raise AssertionError("the local stack must call the inner function")


def poll(deps: Any, token: str | None = None) -> dict[str, Any]:
    with _lock:
        CALLS.append(("poll", {"token": token}))
    return {}
