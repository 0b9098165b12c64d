"""Editor: the table's stream -> fast path, validation and race-free re-arming.

For every batch of stream records:

1. classify each record (``punctual.core.stream``): ignore / reject / send now / arm later;
2. reject malformed rows visibly (rejected-rows queue, log, metric) and go on;
3. claim and send rows due within the window (or past due) right away;
4. arm the rule once for the earliest minute any valid row of the batch needs
   (``arm_no_later_than`` always bumps the meta version, so a concurrent poll
   re-plans), then ``sync_rule``.

A failure of AWS for one record puts that record in ``batchItemFailures`` (Lambda
retries from the lowest one); a record that is itself the problem is rejected, never
raised, so it cannot block the shard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from punctual.core import observability as obs
from punctual.core.arming import arm_is_current, arm_no_later_than, read_arm, rule_matches, sync_rule
from punctual.core.models import RowRejected, task_from_item
from punctual.core.runtime import Deps
from punctual.core.store import get_row, reject_row
from punctual.core.stream import Classified, RecordAction, StreamPlan, plan_stream_batch
from punctual.core.usecases.send import claim_and_send

SOURCE = "editor"


@dataclass
class EditorReport:
    ignored: int = 0
    rejected: int = 0
    sent: int = 0
    skipped: int = 0
    armed_ms: int | None = None
    failures: list[str] = field(default_factory=list)

    def response(self) -> dict[str, Any]:
        ordered = list(dict.fromkeys(self.failures))  # first occurrence of each, in order
        return {"batchItemFailures": [{"itemIdentifier": s} for s in ordered]}


def _fail(report: EditorReport, c: Classified, exc: BaseException, step: str) -> None:
    obs.log("ERROR", "stream record failed; Lambda will retry it", step=step, sequence_number=c.sequence_number,
            exc=exc)
    if c.sequence_number is not None:
        report.failures.append(c.sequence_number)


def _reject(deps: Deps, c: Classified, report: EditorReport) -> None:
    """Reject the row as it is NOW: a later write may have fixed or removed it."""
    s, item = deps.settings, c.item or {}
    pk, sk = item.get("pk", {}).get("S"), item.get("sk", {}).get("S")
    exc = c.rejection or RowRejected("malformed", "unreadable row")
    if isinstance(pk, str) and isinstance(sk, str):
        current = get_row(deps.ddb, s, deps.clock, pk, sk)
        if current is None:
            report.ignored += 1
            return
        try:
            task_from_item(current, s.partitions, s.event_format)
        except RowRejected as now_exc:
            item, exc = current, now_exc
        else:
            report.ignored += 1  # fixed since: its own MODIFY record takes it from here
            return
    reject_row(deps.ddb, deps.sqs, s, deps.clock, item, exc, SOURCE)
    report.rejected += 1


def process_plan(deps: Deps, plan: StreamPlan) -> EditorReport:
    s, clock = deps.settings, deps.clock
    report = EditorReport()
    for c in plan.records:
        if c.action is RecordAction.IGNORE:
            report.ignored += 1
        elif c.action is RecordAction.REJECT:
            try:
                _reject(deps, c, report)
            except Exception as exc:
                _fail(report, c, exc, "reject")

    sends = plan.of(RecordAction.SEND_NOW)
    if sends:
        try:
            # a record's sequence number is its token: Lambda's retry of the batch carries the same
            # records, and may resend what a crashed attempt claimed
            tokens = {c.task.sk: f"stream:{c.sequence_number}" for c in sends
                      if c.task is not None and c.sequence_number is not None}
            result = claim_and_send(deps.ddb, deps.sqs, s, clock, plan.send_now, token=tokens)
            report.sent, report.skipped = len(result.sent), len(result.skipped)
            failed = {t.sk for t in result.failed}
            for c in sends:
                if c.task is not None and c.task.sk in failed:
                    _fail(report, c, RuntimeError("send failed; claim released"), "send")
        except Exception as exc:
            for c in sends:
                _fail(report, c, exc, "send")

    if plan.arm_minute_ms is not None:
        now = clock.now_ms()
        try:
            # Usually a poll is already armed early enough: one read (and a free
            # DescribeRule) instead of a write, a read and a PutRule (invariant 7).
            state = read_arm(deps.ddb, s, clock)
            stale_ms = s.stale_arm_seconds * 1000
            if not (arm_is_current(state, plan.arm_minute_ms, now, stale_ms)
                    and rule_matches(deps.events, s, clock, state)):
                armed = arm_no_later_than(deps.ddb, s, clock, plan.arm_minute_ms, replace_before_ms=now - stale_ms)
                state = sync_rule(deps.ddb, deps.events, s, clock, armed)
            report.armed_ms = state.armed_ms
        except Exception as exc:
            for c in plan.arming_records:
                _fail(report, c, exc, "arm")
    return report


def process_stream(event: dict[str, Any], deps: Deps) -> dict[str, Any]:
    """Handle one batch of DynamoDB stream records; returns the partial-failure response."""
    records = (event.get("Records") or []) if isinstance(event, dict) else []
    plan = plan_stream_batch(records, deps.settings, deps.clock.now_ms())
    report = process_plan(deps, plan)
    obs.log("INFO", "stream batch done", records=len(plan.records), ignored=report.ignored,
            rejected=report.rejected, sent=report.sent, skipped=report.skipped, armed_ms=report.armed_ms,
            failures=len(report.failures))
    return report.response()
