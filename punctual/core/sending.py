"""Claim-then-send of tasks to the delay queue, shared by the poller and the editor.

For each task: claim the row (conditional write), send a pointer message with
DelaySeconds recomputed at send time, and release the claim if the send failed
for good. A crash between claim and send leaves a claimed row that the orphan
check resends later: late, never lost, never early.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import observability as obs
from .clock import Clock
from .config import Settings
from .models import DelayMessage, Task
from .planning import delay_seconds
from .queues import BATCH, Outgoing, send_all
from .store import claim, release


@dataclass
class SendReport:
    sent: list[Task] = field(default_factory=list)
    skipped: list[Task] = field(default_factory=list)  # claimed by someone else / gone
    failed: list[Task] = field(default_factory=list)  # send failed for good (claim released)

    def merge(self, other: SendReport) -> None:
        self.sent += other.sent
        self.skipped += other.skipped
        self.failed += other.failed


def _send_chunk(ddb: Any, sqs: Any, s: Settings, clock: Clock, tasks: Sequence[Task]) -> SendReport:
    report = SendReport()
    claimed: list[tuple[Task, int]] = []
    for task in tasks:
        now = clock.now_ms()
        if claim(ddb, s, clock, task, now):
            claimed.append((task, now))
        else:
            report.skipped.append(task)
    if not claimed:
        return report
    out = [
        Outgoing(
            ref=i,
            body=DelayMessage(
                pk=task.pk, sk=task.sk, due_ms=task.due_ms, attempt=task.attempt + 1, enqueued_ms=at
            ).body(),
        )
        for i, (task, at) in enumerate(claimed)
    ]
    failures = {
        f.ref: f
        for f in send_all(
            sqs,
            s.delay_queue_url,
            out,
            clock,
            delay_for=lambda o: delay_seconds(claimed[o.ref][0].due_ms, clock.now_ms(), s.wake_early_ms),  # type: ignore[index]
        )
    }
    for i, (task, at) in enumerate(claimed):
        failure = failures.get(i)
        if failure is None:
            report.sent.append(task)
            continue
        obs.log("ERROR", "send failed; claim released", sk=task.sk, code=failure.code, error=failure.message)
        release(ddb, s, clock, task, at)
        report.failed.append(task)
    return report


def claim_and_send(ddb: Any, sqs: Any, s: Settings, clock: Clock, tasks: Sequence[Task]) -> SendReport:
    """Send ``tasks`` (sorted by due) in chunks of 10, ``s.send_workers`` chunks at a time."""
    chunks = [tasks[i : i + BATCH] for i in range(0, len(tasks), BATCH)]
    report = SendReport()
    if not chunks:
        return report
    workers = max(1, min(s.send_workers, len(chunks)))
    if workers == 1:
        for chunk in chunks:
            report.merge(_send_chunk(ddb, sqs, s, clock, chunk))
        return report
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(lambda c: _send_chunk(ddb, sqs, s, clock, c), chunks):
            report.merge(part)
    return report
