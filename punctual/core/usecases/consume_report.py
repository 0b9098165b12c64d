"""What a consumer invocation did, filled by the batch (usecases/consume.py) and by the delivery of
its runs (usecases/deliver.py): its own module so that both can import it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from punctual.core.consumer_rules import Control, Pending
from punctual.core.models import DeliveredEvent


@dataclass
class ConsumeReport:
    failures: list[str] = field(default_factory=list)  # messageIds to redeliver
    delivered: list[DeliveredEvent] = field(default_factory=list)
    lateness_ms: list[int] = field(default_factory=list)  # of each delivered event, from its ready time (Task.lateness_ms)
    pickup_ms: list[int] = field(default_factory=list)  # of each pointer message received first (latencies)
    dropped: int = 0
    rejected: int = 0
    put_back: int = 0
    poison: int = 0
    controls: list[Control] = field(default_factory=list)  # poll requests and failure notices
    undeleted: list[Pending] = field(default_factory=list)  # delivered, row not yet deleted
    fenced: set[tuple[str, int]] = field(default_factory=set)  # (task pk, due second) fenced by this invocation

    def response(self) -> dict[str, Any]:
        seen = dict.fromkeys(self.failures)
        return {"batchItemFailures": [{"itemIdentifier": mid} for mid in seen]}
