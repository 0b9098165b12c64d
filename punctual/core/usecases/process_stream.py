"""Editor: the table's stream -> fast path, validation and race-free re-arming.

For every batch of stream records:

1. classify each record (``punctual.core.stream``): ignore / reject / send now / arm later;
2. reject malformed rows visibly (rejected-rows queue, log, metric) and go on;
3. claim and send rows due within the window (or past due) right away; rows it could not
   send (SQS or the table refused) are left to a poll by their due time;
4. arm the rule once for the earliest minute any valid row of the batch needs
   (``arm_no_later_than`` always bumps the meta version, so a concurrent poll
   re-plans), then ``sync_rule``; failing that, ask for the poll through the delay queue.

A record fails (``batchItemFailures``: Lambda retries from the lowest one) only when its row
could be neither sent nor left to a poll (two services failing), or its rejection failed; a
record that is itself the problem is rejected, never raised, so it cannot block the shard
(docs/architecture.md, "A poison record costs only itself").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from punctual.core import observability as obs
from punctual.core.arming import (
    arm_is_current,
    arm_no_later_than,
    minute_over_dead_arm,
    read_arm,
    rule_matches,
    sync_rule,
)
from punctual.core.cron import ARM_MARGIN_MS
from punctual.core.latencies import elapsed_ms, stream_created_ms
from punctual.core.metrics_names import STREAM_LAG_MS
from punctual.core.models import RowRejected, Task
from punctual.core.planning import next_poll_minute, stream_claim_token
from punctual.core.runtime import Deps
from punctual.core.store import get_row, reject_row
from punctual.core.stream import Classified, RecordAction, StreamPlan, check_row, plan_stream_batch
from punctual.core.usecases.ensure_poll import request_poll
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
        _, now_exc = check_row(current, s, deps.clock.now_ms())
        if now_exc is None:
            report.ignored += 1  # fixed since: its own MODIFY record takes it from here
            return
        item, exc = current, now_exc
    reject_row(deps.ddb, deps.sqs, s, deps.clock, item, exc, SOURCE)
    report.rejected += 1


def _send(deps: Deps, sends: list[Classified], plan: StreamPlan, report: EditorReport) -> list[Task]:
    """Claim and send the rows due soon; the rows it could not send (SQS refused them, or the
    table refused their claims), which a poll must now take."""
    # a record's sequence number is its token: Lambda's retry of the batch carries the same
    # records, and may resend what a crashed attempt claimed
    tokens = {c.task.sk: stream_claim_token(c.sequence_number) for c in sends
              if c.task is not None and c.sequence_number is not None}
    try:
        result = claim_and_send(deps.ddb, deps.sqs, deps.settings, deps.clock, plan.send_now, token=tokens)
    except Exception as exc:  # noqa: BLE001 - the rows stay in the table: a poll takes them
        obs.log("ERROR", "fast path failed; the rows are left to a poll", error=obs.error_text(exc),
                rows=len(plan.send_now))
        return list(plan.send_now)
    report.sent, report.skipped = len(result.sent), len(result.skipped)
    return result.failed


def _arm(deps: Deps, minute: int, records: list[Classified], report: EditorReport) -> None:
    """Make sure a poll comes by ``minute``: through the meta row and the rule; failing that,
    through a poll request in the delay queue; only when both fail do the records fail (Lambda
    retries them), so a record costs its lane a retry only when two services are failing."""
    s, clock = deps.settings, deps.clock
    now = clock.now_ms()
    try:
        # Usually a poll is already armed early enough: one read instead of a write, a read and a
        # PutRule; a DescribeRule only when this environment has not seen the rule hold this arm
        # (invariant 7: control-plane calls per arm change, never per task).
        state = read_arm(deps.ddb, s, clock)
        stale_ms = s.stale_arm_seconds * 1000
        if not (arm_is_current(state, minute, now, stale_ms)
                and (deps.rule_seen.holds(state) or rule_matches(deps.events, s, clock, state))):
            armed = arm_no_later_than(deps.ddb, s, clock, minute_over_dead_arm(minute, state, now, stale_ms),
                                      replace_before_ms=now - stale_ms)
            state = sync_rule(deps.ddb, deps.events, s, clock, armed)
        deps.rule_seen.note(state)
        report.armed_ms = state.armed_ms
        return
    except Exception as exc:  # noqa: BLE001
        error = obs.error_text(exc)
    try:
        request_poll(deps, minute, f"an editor could not arm: {error}")
    except Exception as exc:  # noqa: BLE001
        for c in records:
            _fail(report, c, exc, "arm")


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

    minute = plan.arm_minute_ms
    sends = plan.of(RecordAction.SEND_NOW)
    if sends:
        unsent = _send(deps, sends, plan, report)
        if unsent:
            # like the poll's released rows: a poll by their due time - lead (the next minute if
            # that has passed) sends them; no stream retry burns through an SQS brownout
            now = clock.now_ms()
            due = next_poll_minute(now + ARM_MARGIN_MS, min(t.due_ms for t in unsent), None, s.lead_ms)
            minute = due if due is not None and (minute is None or due < minute) else minute
    if minute is not None:
        _arm(deps, minute, plan.arming_records, report)
    return report


def process_stream(event: dict[str, Any], deps: Deps) -> dict[str, Any]:
    """Handle one batch of DynamoDB stream records; returns the partial-failure response. Its metric:
    each record's lag from its creation to this start (``StreamLagMs``, docs/construct.md
    "Self-measurement")."""
    records = (event.get("Records") or []) if isinstance(event, dict) else []
    started = deps.clock.now_ms()
    plan = plan_stream_batch(records, deps.settings, started)
    report = process_plan(deps, plan)
    lags = [elapsed_ms(started, created) for created in map(stream_created_ms, records) if created is not None]
    obs.log_with_metrics("INFO", "stream batch done", deps.settings, [(STREAM_LAG_MS, "Milliseconds", lags)],
                         started, records=len(plan.records), ignored=report.ignored, rejected=report.rejected,
                         sent=report.sent, skipped=report.skipped, armed_ms=report.armed_ms,
                         failures=len(report.failures))
    return report.response()
