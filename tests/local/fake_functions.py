"""A stand-in for the Punctual functions in driver tests: it records what it is given."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


def poll(deps: Any, token: str | None = None) -> dict[str, Any]:
    with _lock:
        CALLS.append(("poll", {"token": token}))
    return {}


def control(event: dict[str, Any], deps: Any) -> dict[str, Any]:
    """The poller invoked by SNS: a message whose text is in FAIL_IDS fails every attempt."""
    with _lock:
        CALLS.append(("sns", event))
        message = event["Records"][0]["Sns"]["Message"]
    if message in FAIL_IDS:
        raise RuntimeError(f"failing on {message}")
    return {}


def handler(event: dict[str, Any], context: Any, deps: Any = None) -> dict[str, Any]:
    """One stand-in for the three functions, as the local stack calls a Punctual handler (with its
    deps): dispatch on the event's source like the real handlers' events differ."""
    assert deps is not None, "the local stack passes its deps to a handler that takes them"
    records = event.get("Records")
    if records is None:  # the rule's scheduled event
        return poll(deps, token=event.get("id"))
    if records and records[0].get("EventSource") == "aws:sns":  # the control topic's
        return control(event, deps)
    if any(r.get("eventSource") == "aws:dynamodb" for r in records):
        return process_stream(event, deps)
    return consume(event, deps)


def wait_for(pred: Callable[[], Any], timeout: float = 5.0, step: float = 0.02) -> bool:
    """Whether ``pred()`` holds within ``timeout`` seconds (the drivers run on their own threads)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())
