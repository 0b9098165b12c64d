"""EventBridge's control-plane quota in virtual time (issue 29).

"Up to 50 requests per second for all CloudWatch Events API operations except PutEvents" (CloudWatch
Events quotas; EventBridge's "all other API requests ... 50 requests per second"), per account and
Region. Every rule call the handlers make (DescribeRule, PutRule, EnableRule, DisableRule, ...) takes a
token from one bucket the whole account shares (all functions, all invocations), refilled at the quota
and holding ``burst_ms`` of it; a call without a token gets what EventBridge answers, a
ThrottlingException, and the handlers' retry policy (punctual.core.retry) backs off on it.

Pure: no I/O, time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from .capacity import TokenBucket

EVENTS_THROTTLED_CODE = "ThrottlingException"
UNLIMITED_OPS = frozenset({"PutEvents"})  # its own, much larger, quota: not a control-plane call


def throttling_error(op: str) -> ClientError:
    return ClientError({"Error": {"Code": EVENTS_THROTTLED_CODE, "Message": "Rate exceeded"}}, op)


@dataclass
class ControlPlaneQuota:
    per_s: float
    burst_ms: int = 1_000
    refused: int = 0
    bucket: TokenBucket = field(init=False)

    def __post_init__(self) -> None:
        rate = self.per_s / 1000
        self.bucket = TokenBucket(rate, rate * self.burst_ms, rate * self.burst_ms, 0)

    def admit(self, op: str, now_ms: int) -> bool:
        """Whether the account's bucket has a token for ``op`` at ``now_ms`` (taking it); a quota of 0: no quota."""
        if self.per_s <= 0 or op in UNLIMITED_OPS or self.bucket.take(1, now_ms):
            return True
        self.refused += 1
        return False
