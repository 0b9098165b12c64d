"""Outages in time: a set of AWS operations (optionally on one queue) failing between two virtual
times, as a 500, throttling, or a 200 whose every entry failed (docs/reliability.md, "Outages").

Used by the tests (tests/faults.py ``Faults.outage``, tests/reliability/outages.py) and by the
benchmark's faults scenario (an outage of 5 and of 30 minutes of each service in turn).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError

DDB_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
DDB_READS = ("GetItem", "Query", "BatchGetItem", "Scan")
SQS_OPS = ("SendMessage", "SendMessageBatch", "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch",
           "ChangeMessageVisibility", "ChangeMessageVisibilityBatch", "GetQueueAttributes")
EVENTS_OPS = ("PutRule", "EnableRule", "DisableRule", "DescribeRule")
SNS_OPS = ("Publish",)  # direct delivery's control topic
# The services an outage takes down: their operations, and the queue ("delay" / "delivery") when
# the outage is one queue's (every other call still passes).
SERVICES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "dynamodb writes": (DDB_WRITES, None),
    "dynamodb reads": (DDB_READS, None),
    "dynamodb": (DDB_WRITES + DDB_READS, None),
    "delay queue": (SQS_OPS, "delay"),
    "delivery queue": (SQS_OPS, "delivery"),
    "eventbridge": (EVENTS_OPS, None),
    "control topic": (SNS_OPS, None),
}
# How a call fails: a 500 (InternalError), throttling (400), or a 200 whose every entry failed (the
# batch APIs: SendMessageBatch's Failed, BatchWriteItem's UnprocessedItems; other calls get a 500)
ERROR_KINDS = ("5xx", "throttle", "failed_entries")


@dataclass(frozen=True)
class Outage:
    """``ops`` fail from ``start_ms`` (included) to ``end_ms`` (excluded), as ``kind`` says; with
    ``queue_url``, only the calls on that queue."""

    ops: tuple[str, ...]
    start_ms: int
    end_ms: int
    kind: str = "5xx"
    queue_url: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ValueError(f"kind must be one of {ERROR_KINDS}, got {self.kind!r}")
        if self.end_ms < self.start_ms:
            raise ValueError("an outage ends after it starts")

    @classmethod
    def of(cls, ops: Iterable[str], start_ms: int, end_ms: int, kind: str = "5xx",
           queue_url: str | None = None) -> Outage:
        return cls(tuple(ops), start_ms, end_ms, kind, queue_url)

    def covers(self, op: str, params: dict[str, Any], now_ms: int) -> bool:
        if op not in self.ops or not self.start_ms <= now_ms < self.end_ms:
            return False
        return self.queue_url is None or params.get("QueueUrl") == self.queue_url

    def respond(self, op: str, params: dict[str, Any]) -> Any:
        """botocore's before-call answer: raise the error, or return (http, parsed) for a 200."""
        if self.kind == "failed_entries" and op in ("SendMessageBatch", "DeleteMessageBatch"):
            return _ok({"Successful": [], "Failed": [
                {"Id": e["Id"], "SenderFault": False, "Code": "InternalError", "Message": "injected"}
                for e in params.get("Entries", [])]})
        if self.kind == "failed_entries" and op == "BatchWriteItem":
            return _ok({"UnprocessedItems": params.get("RequestItems", {})})
        if self.kind == "throttle":
            code = "ProvisionedThroughputExceededException" if op in DDB_WRITES + DDB_READS else "ThrottlingException"
            raise ClientError({"Error": {"Code": code, "Message": "injected outage"},
                               "ResponseMetadata": {"HTTPStatusCode": 400}}, op)
        raise ClientError({"Error": {"Code": "InternalError", "Message": "injected outage"},
                           "ResponseMetadata": {"HTTPStatusCode": 500}}, op)


def service_outage(service: str, start_ms: int, end_ms: int, queue_urls: dict[str, str],
                   kind: str = "5xx") -> Outage:
    """``service`` (a key of SERVICES) out from ``start_ms`` to ``end_ms``; ``queue_urls``: the
    "delay" and "delivery" queues' URLs."""
    ops, queue = SERVICES[service]
    return Outage.of(ops, start_ms, end_ms, kind, queue_url=queue_urls[queue] if queue else None)


def _ok(parsed: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    parsed["ResponseMetadata"] = {"HTTPStatusCode": 200}
    return SimpleNamespace(status_code=200, headers={}, content=b""), parsed
