"""DynamoDB's per-partition throughput in virtual time, and the request units a call consumes.

A partition serves at most ``ddb_partition_wcu_per_s`` write and ``ddb_partition_rcu_per_s``
read units a second (punctual.bench.models.SOURCES). Punctual keeps every task under one
partition key value, so the model keeps one token bucket per partition key value and kind
(reads and writes are throttled independently), refilled continuously at the limit and
holding at most ``burst_ms`` of it. A request is admitted when its bucket holds its units
(or is full, for a request larger than the bucket); over the limit the fake raises what
DynamoDB raises (:func:`throttled_error`).

Pure: no I/O, time is passed in.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from botocore.exceptions import ClientError

Kind = Literal["read", "write"]
THROTTLED_CODE = "ProvisionedThroughputExceededException"


def query_read_units(items: list[dict[str, Any]], consistent: bool) -> float:
    """A Query costs the bytes it read / 4 KB, rounded up, at least 1; half when eventually consistent."""
    size = sum(len(json.dumps(i)) for i in items)
    units = max(1, -(-size // 4096))
    return units if consistent else units / 2


def get_read_units(consistent: bool) -> float:
    """A GetItem of a row under 4 KB."""
    return 1 if consistent else 0.5


# A transactional write costs two writes of each item it names (DynamoDB's pricing: "transactional
# write requests require 2 WRUs to perform one write per 1 KB item"). Assumption: a ConditionCheck
# is billed like the others, and a transaction cancelled by a condition is billed as if applied
# (a failed conditional write is billed too); items up to 1 KB.
TRANSACT_WRITE_UNITS_PER_ITEM = 2


def transact_write_units(params: dict[str, Any]) -> int:
    """The write units a TransactWriteItems request consumes."""
    return TRANSACT_WRITE_UNITS_PER_ITEM * len(params.get("TransactItems") or [])


def throttled_error(op: str, kind: Kind, table_arn: str) -> ClientError:
    """What DynamoDB returns for a partition over its limit: a ProvisionedThroughputExceededException
    whose ThrottlingReasons name the key range (``TableWriteKeyRangeThroughputExceeded``)."""
    reason = f"Table{kind.capitalize()}KeyRangeThroughputExceeded"
    return ClientError({"Error": {"Code": THROTTLED_CODE, "Message": "The level of configured provisioned "
                                  "throughput for the table was exceeded (partition key range)"},
                        "ThrottlingReasons": [{"reason": reason, "resource": table_arn}]}, op)


def is_throttled(response: dict[str, Any]) -> bool:
    return bool(response.get("Error", {}).get("Code") == THROTTLED_CODE)


@dataclass
class TokenBucket:
    rate_per_ms: float
    size: float
    tokens: float
    at_ms: int

    def take(self, units: float, now_ms: int) -> bool:
        self.tokens = min(self.size, self.tokens + max(0, now_ms - self.at_ms) * self.rate_per_ms)
        self.at_ms = max(self.at_ms, now_ms)
        if self.tokens < min(units, self.size):
            return False
        self.tokens -= units
        return True


@dataclass
class PartitionCapacity:
    write_per_s: float
    read_per_s: float
    burst_ms: int = 1_000
    buckets: dict[tuple[str, Kind], TokenBucket] = field(default_factory=dict)
    throttled: Counter = field(default_factory=Counter)  # (partition key value, kind) -> refused requests

    def admit(self, pk: str, kind: Kind, units: float, now_ms: int) -> bool:
        bucket = self.buckets.get((pk, kind))
        if bucket is None:
            rate = (self.write_per_s if kind == "write" else self.read_per_s) / 1000
            bucket = self.buckets[(pk, kind)] = TokenBucket(rate, rate * self.burst_ms, rate * self.burst_ms, now_ms)
        if bucket.take(units, now_ms):
            return True
        self.throttled[(pk, kind)] += 1
        return False
