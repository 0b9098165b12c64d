"""Use case "ensure a poll": make sure a poll starts by a time, whichever one service is failing.

Arming normally goes through the table (the meta row) and then the rule (``arming.py``). When
that fails, the schedule must not stall (invariant 2, docs/architecture.md "When arming fails"):

- :func:`request_poll`: whoever could not arm (a poll that failed, an editor) asks for a poll
  through the delay queue, a ``PollRequest`` message the consumer receives;
- :func:`ensure_poll`: the consumer arms for it: through the meta row and the rule as usual; with
  the table failing, the rule alone, never later than it holds (the poll it starts re-arms from
  the table); with the rule
  failing, it raises, and the consumer asks again a little later (:data:`RETRY_SECONDS`).

Each step needs a different service, so one service failing leaves a way to the next poll.
"""

from __future__ import annotations

from collections.abc import Sequence

from punctual.core import metrics_names as names
from punctual.core import observability as obs
from punctual.core.arming import ArmState, apply_rule, arm_no_later_than, rule_alone_minute, rule_minute, sync_rule
from punctual.core.consumer_rules import Control
from punctual.core.cron import ARM_MARGIN_MS, floor_minute, next_minute_after, one_shot_cron
from punctual.core.models import PollRequest
from punctual.core.queues import send_one
from punctual.core.retry import call_with_retry
from punctual.core.runtime import Deps

# A poll request whose poll could not be armed is sent again this much later.
RETRY_SECONDS = 20


def poll_minute(by_ms: int | None, now_ms: int) -> int:
    """The minute to arm for a poll wanted by ``by_ms`` (None: as soon as possible): the minute
    containing it, or the first one still safe to arm when that has begun or is too close."""
    earliest = next_minute_after(now_ms + ARM_MARGIN_MS)
    return earliest if by_ms is None else max(floor_minute(by_ms), earliest)


def ensure_poll(deps: Deps, by_ms: int | None, given_up: frozenset[str] = frozenset()) -> ArmState | None:
    """Arm the rule for a poll by ``by_ms``; the state written, or None when only the rule could be
    armed (the table refused). Raises when the rule cannot be armed. ``given_up``: stream batches
    Lambda gave up on, noted in the meta row for that poll to take over what they claimed.

    The rule is left as it is when it already holds a minute that brings a poll no later than the
    meta row's (``rule_alone_minute``; one DescribeRule): the minute in progress the consumer armed
    alone while the table failed, whose firing may be pending, is not moved a minute later."""
    s, clock = deps.settings, deps.clock
    now = clock.now_ms()
    minute = poll_minute(by_ms, now)
    try:
        # replaces a begun minute's arm: it fired already (or is dead), and a later arm
        state = arm_no_later_than(deps.ddb, s, clock, minute, replace_before_ms=now + 1, given_up=given_up)
    except Exception as exc:  # noqa: BLE001 - the table is failing: the rule alone still starts a poll
        put = rule_alone_minute(minute, rule_minute(deps.events, s, clock), now)
        obs.log("WARNING", "meta row unavailable: arming the rule alone", error=obs.error_text(exc),
                cron=one_shot_cron(minute), kept_earlier=put is None)
        if put is not None:
            apply_rule(deps.events, s, clock, put)
        return None
    if state.armed_ms is not None and rule_alone_minute(state.armed_ms, rule_minute(deps.events, s, clock), now) is None:
        return state  # the rule already brings a poll as soon: the minute in progress, armed alone, is left
    return sync_rule(deps.ddb, deps.events, s, clock, state)


class NoPollRequests(RuntimeError):
    """Neither a delay queue nor a control topic is configured: a poll cannot be asked for."""


def request_poll(deps: Deps, by_ms: int | None, reason: str, delay_seconds: int = 0) -> None:
    """Ask for a poll by ``by_ms`` (raises if the channel refuses): through the control topic to the
    poller in direct delivery (no delay: ``delay_seconds`` must be 0), else through the delay queue
    to the consumer."""
    s = deps.settings
    body = PollRequest(poll_by_ms=by_ms if by_ms is not None else deps.clock.now_ms(), reason=reason[:300]).body()
    if s.control_topic_arn and deps.sns is not None:
        if delay_seconds:
            raise ValueError("the control topic cannot delay a poll request")
        sns = deps.sns
        call_with_retry(lambda: sns.publish(TopicArn=s.control_topic_arn, Message=body), deps.clock)
        channel = "the control topic"
    elif s.delay_queue_url:
        send_one(deps.sqs, s.delay_queue_url, body, deps.clock, delay_seconds=delay_seconds)
        channel = "the delay queue"
    else:
        raise NoPollRequests("no channel to ask for a poll through (PUNCTUAL_CONTROL_TOPIC_ARN, "
                             "PUNCTUAL_DELAY_QUEUE_URL)")
    obs.log("WARNING", f"poll requested through {channel}", reason=reason[:300], poll_by_ms=by_ms,
            delay_seconds=delay_seconds)


# A poll armed alone (the table failing) is asked for again every RETRY_SECONDS for this long after
# the time it was wanted by: until the table takes it, or a later failed poll's request takes over.
ARMED_ALONE_ASK_AGAIN_MS = 120_000


def control_metrics(controls: Sequence[Control]) -> list[tuple[str, str, float]]:
    """The counts of poll requests and failure notices (a notice: a function failed for good, which
    the FunctionFailures alarm watches), those that are not zero, as EMF values."""
    notices = sum(1 for c in controls if c.notice)
    return [(name, "Count", count) for name, count in (
        (names.FUNCTION_FAILURES, notices), (names.POLL_REQUESTS, len(controls) - notices)) if count]


def arm_for_controls(deps: Deps, controls: Sequence[Control]) -> tuple[int | None, str | None]:
    """Arm one poll for the earliest any poll request or failure notice asks for (logged). Returns
    (the time wanted, None: None for as soon as possible) and why to ask again a little later, or
    None when done: the rule could not be armed, or only the rule could (the table failing) and
    the time wanted is less than ARMED_ALONE_ASK_AGAIN_MS ago."""
    wanted = [c.poll_by_ms for c in controls]
    by = None if None in wanted else min(w for w in wanted if w is not None)
    for c in controls:
        level: obs.Level = "ERROR" if c.notice else "WARNING"  # a notice: a function failed for good
        obs.log(level, "poll wanted", message_id=c.message_id, reason=c.reason, poll_by_ms=c.poll_by_ms)
    given_up = frozenset(c.given_up for c in controls if c.given_up is not None)
    now = deps.clock.now_ms()
    try:
        if ensure_poll(deps, by, given_up) is not None:
            return by, None
        if by is not None and now - by >= ARMED_ALONE_ASK_AGAIN_MS:
            return by, None  # polls failing meanwhile ask afresh: one chain of requests at a time, not one a poll
        # the table refused: until the meta row holds the poll too, a writer syncing the rule from
        # it after the recovery (an editor arming a later row) would move the rule off it
        return by, "the rule was armed alone: the meta row could not be written"
    except Exception as exc:  # noqa: BLE001 - the rule is failing: the request goes round again
        return by, f"the rule could not be armed: {obs.error_text(exc)}"
