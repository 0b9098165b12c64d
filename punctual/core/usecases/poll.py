"""Poller: fired by the rule -> read the window -> claim and send -> re-arm.

1. take the poll lease and arm a safety-net poll (so a crash below is followed by another
   poll); if another poll holds the lease, make sure a poll follows next minute and stop;
2. read every row due up to now + window (past-due rows and malformed rows too);
3. reject malformed and undeliverable rows, claim and send new rows and orphans;
4. find the next unsent row after the window and compare-and-set the arm;
5. apply the arm to the rule (or disable it when nothing is pending).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from punctual.core import observability as obs
from punctual.core.arming import (
    ArmState,
    PollInProgress,
    arm_no_later_than,
    compare_and_set,
    read_arm,
    release_lease,
    sync_rule,
)
from punctual.core.cron import ARM_MARGIN_MS, next_minute_after, one_shot_cron
from punctual.core.keys import after_window_key, window_upper_key
from punctual.core.latencies import elapsed_ms
from punctual.core.metrics_names import ORPHANS_DEFERRED, POLL_DELAY_MS
from punctual.core.models import RowRejected, task_from_item
from punctual.core.planning import (
    DeadClaims,
    FollowUp,
    RowState,
    WindowPlan,
    after_send,
    defer_orphans,
    minute_after_poll,
    orphan_check_of,
    orphan_count,
    plan_window,
    row_state,
    safety_net_minute,
    undeliverable,
)
from punctual.core.queues import backlog_messages
from punctual.core.runtime import Deps
from punctual.core.store import across_partitions, query_below, query_from, reject_row
from punctual.core.usecases.ensure_poll import request_poll
from punctual.core.usecases.send import claim_and_send

CAS_ROUNDS = 8


@dataclass
class PollReport:
    started_ms: int
    window_end_ms: int
    read: int = 0
    sent: int = 0
    skipped: int = 0
    failed: int = 0
    in_flight: int = 0
    rejected: int = 0
    deferred: int = 0
    busy: bool = False  # another poll held the lease: this one only armed the next minute
    next_minute_ms: int | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "sent": self.sent,
            "skipped": self.skipped,
            "failed": self.failed,
            "in_flight": self.in_flight,
            "rejected": self.rejected,
            "deferred": self.deferred,
            "busy": self.busy,
            "next_poll": one_shot_cron(self.next_minute_ms) if self.next_minute_ms is not None else None,
        }


def _valid_tasks(deps: Deps, items, report: PollReport, source: str):
    s = deps.settings
    for item in items:
        report.read += 1
        try:
            yield item, task_from_item(item, s.partitions, s.event_format)
        except RowRejected as exc:
            reject_row(deps.ddb, deps.sqs, s, deps.clock, item, exc, source)
            report.rejected += 1


def _first_unsent_after(deps: Deps, end_ms: int, report: PollReport) -> tuple[int | None, int | None]:
    """Due time of the first unsent row after ``end_ms``, and the latest orphan check of
    rows already in flight on the way (the editor may have sent some early)."""
    s, now = deps.settings, deps.clock.now_ms()
    check = None
    lower = after_window_key(end_ms)
    rows = across_partitions(lambda pk: query_from(deps.ddb, s, deps.clock, lower, pk=pk), s.partitions)
    for _, task in _valid_tasks(deps, rows, report, "poller"):
        if row_state(task, now, s.orphan_grace_ms, s.max_attempts) is not RowState.IN_FLIGHT:
            # new, or marked but not really in flight (a mark no poll could have written): it
            # needs a poll by its due time like a new row
            return task.due_ms, check
        check = max(check or 0, orphan_check_of(task, s.orphan_grace_ms))
    return None, check


def _window(deps: Deps, end_ms: int):
    """Every row due before ``end_ms`` (past due too) in every partition, oldest first; the
    partitions are read side by side (docs/architecture.md, "Shards")."""
    s, upper = deps.settings, window_upper_key(end_ms)
    return across_partitions(lambda pk: query_below(deps.ddb, s, deps.clock, upper, pk=pk), s.partitions,
                             s.send_workers)


def _unless_backlogged(deps: Deps, plan: WindowPlan, now_ms: int, report: PollReport) -> WindowPlan:
    """Orphans are resent only when the delay queue does not hold at least as many messages ready
    or in flight: a backlog that large means the consumer is behind, not that messages were lost
    (see planning.defer_orphans). One GetQueueAttributes, only in polls that found orphans."""
    s = deps.settings
    orphans = orphan_count(plan)
    if not orphans or s.direct:  # direct delivery has no delay queue
        return plan
    backlog = backlog_messages(deps.sqs, s.delay_queue_url, deps.clock)
    if backlog is None or backlog < orphans:
        return plan
    report.deferred = orphans
    obs.log("WARNING", "orphans deferred: the delay queue has a backlog", orphans=orphans,
            delay_queue_backlog=backlog, recheck_after_ms=s.orphan_grace_ms)
    obs.metric(s, ORPHANS_DEFERRED, orphans)
    return defer_orphans(plan, now_ms, s.orphan_grace_ms)


def _defer_to_running_poll(deps: Deps, report: PollReport, running: PollInProgress) -> PollReport:
    """Another poll holds the lease. Arm the next safe minute (bumping the version, so the running
    poll's compare-and-set fails and it re-plans, keeping the rule no later than this) and stop:
    the rule fires again next minute, when the lease is usually free."""
    s, clock = deps.settings, deps.clock
    now = clock.now_ms()
    minute = next_minute_after(now + ARM_MARGIN_MS)
    state = arm_no_later_than(deps.ddb, s, clock, minute, replace_before_ms=now + 1)
    sync_rule(deps.ddb, deps.events, s, clock, state)
    report.busy, report.next_minute_ms = True, state.armed_ms
    obs.log("INFO", "poll in progress: deferred to it", running_since_ms=running.state.polling_ms,
            next_poll=one_shot_cron(state.armed_ms) if state.armed_ms is not None else None)
    return report


def invocation_token(event: Any, context: Any) -> str | None:
    """The poll's token: the EventBridge event id, which Lambda's retries of the invocation keep
    (so does the request id, the fallback for a direct invoke)."""
    event_id = event.get("id") if isinstance(event, dict) else None
    if isinstance(event_id, str) and event_id:
        return event_id
    request_id = getattr(context, "aws_request_id", None)
    return request_id if isinstance(request_id, str) and request_id else None


def poll(deps: Deps, token: str | None = None, scheduled_ms: int | None = None) -> PollReport:
    """One poll. ``token`` (invocation_token): the same in every attempt of one invocation; an
    attempt resends at once the rows an earlier attempt claimed, and takes over its lease.
    ``scheduled_ms``: the minute the rule fired for (latencies.scheduled_minute_ms; None for an
    invocation no schedule made): the poll's delay from it is its first metric (``PollDelayMs``,
    docs/construct.md "Self-measurement"; a retry of the invocation counts its retry delay too).

    A poll that fails gives its lease back and asks for the next poll through the delay queue
    (ensure_poll.request_poll), then raises (Lambda retries it): a table or a rule failing for
    longer than the retries never leaves the schedule without a poll coming (docs/architecture.md,
    "When arming fails")."""
    started = deps.clock.now_ms()
    if scheduled_ms is not None:
        obs.metric(deps.settings, POLL_DELAY_MS, elapsed_ms(started, scheduled_ms), unit="Milliseconds",
                   timestamp_ms=started)
    try:
        return _poll(deps, token, started)
    except Exception as exc:
        _after_failure(deps, started, exc)
        raise


def _after_failure(deps: Deps, started: int, exc: Exception) -> None:
    error = obs.error_text(exc)
    obs.log("ERROR", "poll failed", error=error)
    for step, action in (
        ("release the lease", lambda: release_lease(deps.ddb, deps.settings, deps.clock, started)),
        ("request the next poll", lambda: request_poll(deps, None, f"a poll failed: {error}")),
    ):
        try:
            action()
        except Exception as err:  # noqa: BLE001 - best effort: Lambda's retry and the others remain
            obs.log("ERROR", f"poll failed and could not {step}", error=obs.error_text(err))


def _take_lease(deps: Deps, token: str | None, started: int) -> ArmState:
    """The poll's first write: arm a safety-net poll (if this invocation dies anywhere below, a poll
    still follows) and take the lease (a poll that started more than poll_lease ago is dead: its
    Lambda timed out); :class:`PollInProgress` when another poll holds it. Returns the meta row as
    applied to the rule (its version)."""
    s, clock = deps.settings, deps.clock
    state = arm_no_later_than(deps.ddb, s, clock, safety_net_minute(started, s.orphan_grace_ms),
                              replace_before_ms=started + 1, polling_since_ms=started,
                              lease_cut_ms=started - s.poll_lease_ms + 1, lease_token=token)
    return sync_rule(deps.ddb, deps.events, s, clock, state)


def _died(token: str | None, lease: ArmState) -> DeadClaims:
    """Claims whose work died, which this poll finishes (planning.row_state): an earlier attempt of
    this one (its own token), the poll whose lease it took over (failed, or dead), the stream batches
    Lambda gave up on (noted in the meta row by the consumer that got their failure notice)."""
    tokens = frozenset(t for t in (token, lease.lease_taken_from) if t) if token is not None else frozenset()
    return DeadClaims(tokens, lease.given_up)


def _send_window(deps: Deps, token: str | None, died: DeadClaims, report: PollReport) -> FollowUp:
    """Read the window (past-due rows count), reject what must be, claim and send new rows and
    orphans (a row claimed by a poll that ``died``: at once, with that claim's count); what the next
    poll must cover."""
    s, clock, started = deps.settings, deps.clock, report.started_ms
    rows = dict(
        ((task.pk, task.sk), (item, task))
        for item, task in _valid_tasks(deps, _window(deps, report.window_end_ms), report, "poller")
    )
    # rows are judged at the time they were read, not at the poll's start: a claim an editor made
    # while a long poll read would look like a mark from the future (planning.MAX_MARK_SKEW_MS)
    plan = plan_window(clock.now_ms(), [task for _, task in rows.values()], s.window_ms, s.orphan_grace_ms,
                       s.max_attempts, s.wake_early_ms, died)
    plan = _unless_backlogged(deps, plan, started, report)
    report.in_flight = plan.in_flight
    for task in plan.exhausted:
        reject_row(deps.ddb, deps.sqs, s, clock, rows[task.pk, task.sk][0], undeliverable(task), "poller")
        report.rejected += 1
    sent = claim_and_send(deps.ddb, deps.sqs, s, clock, [send.task for send in plan.sends], token=token,
                          take_over=died, align=True)
    report.sent, report.skipped, report.failed = len(sent.sent), len(sent.skipped), len(sent.failed)
    return after_send(plan, [t.due_ms for t in sent.skipped], [t.due_ms for t in sent.failed], clock.now_ms(),
                      s.orphan_grace_ms)


def _replan(deps: Deps, report: PollReport, follow: FollowUp) -> FollowUp:
    """After a failed compare-and-set: an editor wrote meanwhile and may have sent rows inside the
    window, whose orphan checks the next poll must cover, or left some unsent (a poll soon). Re-read
    the window (claims only; no sends)."""
    s, clock = deps.settings, deps.clock
    again = plan_window(clock.now_ms(),
                        (t for _, t in _valid_tasks(deps, _window(deps, report.window_end_ms), report, "poller")),
                        s.window_ms, s.orphan_grace_ms, s.max_attempts)
    return follow.check_after(again.orphan_check_ms).unsent_by(*(send.task.due_ms for send in again.sends))


def _arm_next(deps: Deps, report: PollReport, state: ArmState, follow: FollowUp) -> ArmState:
    """Compare-and-set the next poll against the version this poll armed; re-plan on conflict."""
    s, clock = deps.settings, deps.clock
    seen_armed, handled = state.armed_ms, state.given_up  # taken over by this poll's sends: forgotten
    for _ in range(CAS_ROUNDS):
        next_due, beyond_check = _first_unsent_after(deps, report.window_end_ms, report)
        minute = minute_after_poll(clock.now_ms(), follow, next_due, beyond_check, s.lead_ms, seen_armed,
                                   state.armed_ms)
        written = compare_and_set(deps.ddb, s, clock, state.version, minute, handled)
        if written is not None:
            report.next_minute_ms = minute
            return written
        state = read_arm(deps.ddb, s, clock)
        follow = _replan(deps, report, follow)
    raise RuntimeError("could not arm the rule: the meta row kept changing")


def _poll(deps: Deps, token: str | None, started: int) -> PollReport:
    report = PollReport(started_ms=started, window_end_ms=started + deps.settings.window_ms)
    try:
        state = _take_lease(deps, token, started)  # 1. safety net and lease
    except PollInProgress as running:
        return _defer_to_running_poll(deps, report, running)
    follow = _send_window(deps, token, _died(token, state), report)  # 2-3. the window
    written = _arm_next(deps, report, state, follow)  # 4. the next poll
    sync_rule(deps.ddb, deps.events, deps.settings, deps.clock, written)  # 5. converges with editors
    obs.log("INFO", "poll done", **report.summary(), window_end_ms=report.window_end_ms)
    return report
