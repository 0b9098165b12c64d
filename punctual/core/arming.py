"""The one EventBridge rule, armed race-free through a versioned row in the table.

The desired state lives in the meta row ``(META_PK, META_ARM_SK)``: ``armed_ms``
(start of the UTC minute the rule should fire in; absent = disabled) and a
``version`` bumped by every writer. Writers change it with conditional writes,
then *apply* it to the rule and re-read it until what they applied is what the
row says (:func:`sync_rule`): whichever writer applies last has seen the final
value, so the rule always converges to the row.

- The editor calls :func:`arm_no_later_than`: moves the arm earlier, never later,
  and always bumps the version, so a poll running concurrently fails its
  compare-and-set and re-plans with the new row in sight.
- The poller calls :func:`arm_no_later_than` for a safety-net poll when it starts
  and :func:`compare_and_set` with the version it read when it finishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import observability as obs
from .clock import Clock
from .config import META_ARM_SK, META_PK, RULE_DESCRIPTION, Settings
from .cron import ARM_MARGIN_MS, floor_minute, next_minute_after, one_shot_cron, parse_one_shot_cron
from .retry import call_with_retry
from .store import conditional_update

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient

_KEY = {"pk": {"S": META_PK}, "sk": {"S": META_ARM_SK}}
_TAKEN_FROM = "lease_taken_from"
_GIVEN_UP = "given_up_batches"


class PollInProgress(RuntimeError):
    """Another poll holds the lease: its ``polling_ms`` is newer than the lease cut."""

    def __init__(self, state: ArmState):
        super().__init__(f"a poll started at {state.polling_ms} is in progress")
        self.state = state


@dataclass(frozen=True)
class ArmState:
    armed_ms: int | None  # None: disabled
    version: int  # 0: the meta row does not exist yet
    polling_ms: int | None = None  # a poll started then and has not finished its arming yet
    polling_token: str | None = None  # that poll's token (see arm_no_later_than)
    # The token of the lease the last poll took over (arm_no_later_than with a lease token): of a poll
    # that died or failed holding it, or of an earlier attempt of the same poll; None if it was free.
    lease_taken_from: str | None = None
    # Stream batches Lambda gave up on whose claims a poll still has to take over (planning.given_up_batch)
    given_up: frozenset[str] = frozenset()


def _state(item: dict[str, Any] | None) -> ArmState:
    if not item:
        return ArmState(None, 0)
    armed = item.get("armed_ms", {}).get("N")
    polling = item.get("polling_ms", {}).get("N")
    return ArmState(
        int(armed) if armed is not None else None,
        int(item.get("version", {}).get("N", "0")),
        int(polling) if polling is not None else None,
        item.get("polling_token", {}).get("S"),
        item.get(_TAKEN_FROM, {}).get("S") or None,
        frozenset(item.get(_GIVEN_UP, {}).get("SS", ())),
    )


def read_arm(ddb: DynamoDBClient, s: Settings, clock: Clock) -> ArmState:
    resp = call_with_retry(
        lambda: ddb.get_item(TableName=s.table_name, Key=_KEY, ConsistentRead=True), clock
    )
    return _state(resp.get("Item"))



def _update_meta(ddb: DynamoDBClient, s: Settings, clock: Clock, update: str, cond: str, names: dict[str, str],
                 values: dict[str, Any], **extra: Any) -> dict[str, Any] | None:
    """A conditional UpdateItem of the meta row: the response if applied, None if the condition failed."""
    return conditional_update(ddb, clock, TableName=s.table_name, Key=_KEY, UpdateExpression=update,
                              ConditionExpression=cond, ExpressionAttributeNames=names,
                              ExpressionAttributeValues=values, **extra)


def compare_and_set(
    ddb: DynamoDBClient, s: Settings, clock: Clock, expected_version: int, armed_ms: int | None,
    handled: frozenset[str] = frozenset(),
) -> ArmState | None:
    """Set the arm if nobody wrote since ``expected_version``; None if someone did.

    Only the poller calls this, at the end of a poll: it also clears ``polling_ms``, and forgets the
    given-up stream batches it ``handled`` (took their claims over).
    """
    names = {"#v": "version", "#a": "armed_ms", "#u": "updated_ms", "#p": "polling_ms", "#t": "polling_token"}
    values: dict[str, Any] = {":next": {"N": str(expected_version + 1)}, ":now": {"N": str(clock.now_ms())}}
    if expected_version == 0:
        cond = "attribute_not_exists(#v)"
    else:
        cond = "#v = :expected"
        values[":expected"] = {"N": str(expected_version)}
    if armed_ms is None:
        update = "SET #v = :next, #u = :now REMOVE #a, #p, #t"
    else:
        update = "SET #v = :next, #u = :now, #a = :armed REMOVE #p, #t"
        values[":armed"] = {"N": str(armed_ms)}
    if handled:
        update += " DELETE #g :handled"
        names["#g"] = _GIVEN_UP
        values[":handled"] = {"SS": sorted(handled)}
    if _update_meta(ddb, s, clock, update, cond, names, values) is None:
        return None
    return ArmState(armed_ms, expected_version + 1)


def arm_no_later_than(
    ddb: DynamoDBClient,
    s: Settings,
    clock: Clock,
    minute_ms: int,
    replace_before_ms: int,
    rounds: int = 8,
    polling_since_ms: int | None = None,
    lease_cut_ms: int | None = None,
    lease_token: str | None = None,
    given_up: frozenset[str] = frozenset(),
) -> ArmState:
    """Arm for ``minute_ms`` unless an earlier, live arm exists; always bump the version; note the
    stream batches ``given_up`` on (planning.given_up_batch) for the poll to take their claims over.

    An existing arm is replaced when it is later than ``minute_ms``, or when its
    minute began before ``replace_before_ms`` (it fired already or is dead).

    Both outcomes are conditional writes: "set it" when the arm is absent, later or
    dead, and "keep it, bump the version" only while the arm is still live and no
    later than ``minute_ms``. An unconditional bump after a failed "set it" would
    race a poller's compare-and-set that disables or moves the arm in between: the
    bump would then succeed on top of it and this caller's poll would be lost
    (found by tests/reliability/test_races.py).

    With ``polling_since_ms`` the caller is a poll taking the lease: with ``lease_cut_ms`` both
    writes also require that no other poll started after the cut (``polling_ms`` absent or older),
    and :class:`PollInProgress` is raised when one did. A lease taken with ``lease_token`` can be
    taken again, live or not, with the same token: by Lambda's retry of that poll, which only
    comes after the poll failed. The token the write replaces is kept as ``lease_taken_from``: the
    rows the poll that held it claimed are finished by the new holder (planning.row_state).
    """
    names, values, writes = _arm_writes(minute_ms, replace_before_ms, clock.now_ms(), polling_since_ms, lease_cut_ms,
                                        lease_token, given_up)
    for _ in range(rounds):
        for update, cond in writes:
            resp = _update_meta(ddb, s, clock, update, cond, names, values, ReturnValues="ALL_NEW")
            if resp is not None:
                return _state(resp.get("Attributes"))
        if lease_cut_ms is not None and polling_since_ms is not None:
            state = read_arm(ddb, s, clock)
            if state.polling_ms is not None and state.polling_ms >= lease_cut_ms and not (
                    lease_token is not None and state.polling_token == lease_token):
                raise PollInProgress(state)
    raise RuntimeError("could not arm the rule: the meta row kept changing")


def _arm_writes(minute_ms: int, replace_before_ms: int, now_ms: int, polling_since_ms: int | None,
                lease_cut_ms: int | None, lease_token: str | None, given_up: frozenset[str],
                ) -> tuple[dict[str, str], dict[str, Any], tuple[tuple[str, str], tuple[str, str]]]:
    """The two conditional writes of :func:`arm_no_later_than` (names, values, and each write's
    update and condition): "set it" (the arm absent, later or dead) and "keep it, bump the version"
    (the arm live and no later), each with the lease's mark and condition when a poll takes it."""
    names = {"#v": "version", "#a": "armed_ms", "#u": "updated_ms"}
    values: dict[str, Any] = {
        ":m": {"N": str(minute_ms)},
        ":cut": {"N": str(replace_before_ms)},
        ":one": {"N": "1"},
        ":now": {"N": str(now_ms)},
    }
    mark = lease = ""
    if polling_since_ms is not None:  # the poller announces itself (see arm_is_current)
        names["#p"] = "polling_ms"
        values[":poll"] = {"N": str(polling_since_ms)}
        mark = ", #p = :poll"
        if lease_token is not None:
            names |= {"#t": "polling_token", "#f": _TAKEN_FROM}
            values |= {":tok": {"S": lease_token}, ":free": {"S": ""}}
            mark += ", #t = :tok, #f = if_not_exists(#t, :free)"
        if lease_cut_ms is not None:
            values[":lease"] = {"N": str(lease_cut_ms)}
            mine = " OR #t = :tok" if lease_token is not None else ""
            lease = f" AND (attribute_not_exists(#p) OR #p < :lease{mine})"
    add = " ADD #v :one"
    if given_up:
        names["#g"] = _GIVEN_UP
        values[":given_up"] = {"SS": sorted(given_up)}
        add += ", #g :given_up"
    return names, values, (
        (f"SET #a = :m, #u = :now{mark}{add}", f"(attribute_not_exists(#a) OR #a > :m OR #a < :cut){lease}"),
        (f"SET #u = :now{mark}{add}", f"attribute_exists(#a) AND #a <= :m AND #a >= :cut{lease}"),
    )


def release_lease(ddb: DynamoDBClient, s: Settings, clock: Clock, polling_since_ms: int) -> bool:
    """Give up the lease a poll that started at ``polling_since_ms`` took, so that the next poll
    need not wait for it to lapse (a poll that failed); False if it was not ours any more. Its token
    stays: the next poll takes over what it claimed and did not send (``lease_taken_from``)."""
    return _update_meta(ddb, s, clock, "REMOVE #p", "#p = :mine", {"#p": "polling_ms"},
                        {":mine": {"N": str(polling_since_ms)}}) is not None


# PutRule must land safely before the minute it arms: a one-shot cron for a minute that
# has begun may never fire, and time passes between choosing a minute and applying it.
APPLY_MARGIN_MS = 5_000


def applicable_minute(armed_ms: int, now_ms: int) -> int:
    """``armed_ms``, or the first minute starting >= APPLY_MARGIN_MS from now if it is too close.

    The row may name a minute that began while its writer was retrying or slow (or
    one that fired already); arming it as is would leave no poll at all. Arming the
    next safe minute instead makes that poll up to a minute late, never lost.
    """
    return max(armed_ms, next_minute_after(now_ms + APPLY_MARGIN_MS - 1))


def arm_is_current(state: ArmState, minute_ms: int, now_ms: int, stale_poll_ms: int) -> bool:
    """Does the meta row already promise a poll by ``minute_ms``, with no poll in progress?

    Then an editor needs to write nothing: the armed poll starts after this moment, so
    it reads every row committed before it (the editor only sees committed rows). A
    poll in progress (``polling_ms`` set, not stale) may have read the table before the
    editor's row and must be made to re-plan: the editor then takes the full path
    (:func:`arm_no_later_than` bumps the version its compare-and-set checks).
    """
    if state.armed_ms is None or state.armed_ms > minute_ms:
        return False
    if state.armed_ms < applicable_minute(state.armed_ms, now_ms):
        return False  # begun, or too close to apply: not a promise any more
    return state.polling_ms is None or state.polling_ms < now_ms - stale_poll_ms


def minute_over_dead_arm(minute_ms: int, state: ArmState, now_ms: int, stale_ms: int) -> int:
    """The minute an editor arms for a row wanted by ``minute_ms`` given the meta row it read: an arm
    that began more than ``stale_ms`` ago is dead (its poll never ran: the table refused writes while
    the consumer armed the rule alone, say), and the rows it was armed for still need a poll: the first
    minute still safe to arm, if earlier. Arming the row's own minute, hours away, moved the rule off
    the poll the consumer had armed alone (a 30-minute table-write outage: rows 10,450 s late)."""
    if state.armed_ms is None or state.armed_ms >= now_ms - stale_ms:
        return minute_ms
    return min(minute_ms, next_minute_after(now_ms + ARM_MARGIN_MS))


def _rule_is(events: EventBridgeClient, s: Settings, clock: Clock, armed_ms: int | None) -> bool:
    rule = call_with_retry(lambda: events.describe_rule(Name=s.rule_name), clock)
    if armed_ms is None:
        return rule.get("State") == "DISABLED"
    return rule.get("State") == "ENABLED" and rule.get("ScheduleExpression") == one_shot_cron(armed_ms)


def rule_minute(events: EventBridgeClient, s: Settings, clock: Clock) -> int | None:
    """The minute the rule is armed for (DescribeRule); None when disabled or not a one-shot cron."""
    rule = call_with_retry(lambda: events.describe_rule(Name=s.rule_name), clock)
    if rule.get("State") != "ENABLED":
        return None
    try:
        return parse_one_shot_cron(str(rule.get("ScheduleExpression") or ""))
    except ValueError:
        return None


def rule_alone_minute(wanted_ms: int, held_ms: int | None, now_ms: int) -> int | None:
    """Arming the rule without the table (its meta row unavailable): the minute to put, or None to
    leave the rule as it is. A minute the rule holds that is no later than the one wanted and is
    the minute in progress (EventBridge fires anywhere in it: its firing may be pending) or one to
    come still brings a poll as soon: never moved later (that cancelled the poll, and with it the
    chain of poll requests, in a 30-minute DynamoDB writes outage: 320-340 s after the recovery). A
    minute that has passed is replaced (if it fired and its poll failed, that poll's failure
    notice asks again)."""
    return None if held_ms is not None and floor_minute(now_ms) <= held_ms <= wanted_ms else wanted_ms


@dataclass
class RuleSeen:
    """What this execution environment last knew the rule to hold: the meta row's (version,
    armed_ms) it read when the rule matched it (a DescribeRule, or its own :func:`sync_rule`).
    Every writer bumps the version before it changes the rule, so while the row still holds that
    version the rule has not been re-armed since and an editor need not ask EventBridge again:
    DescribeRule (a control-plane call, rate-limited per account) once per environment and arm
    change, never per task (docs/architecture.md, "Arming").

    One execution environment's memory (runtime.Deps), never shared: another environment checks
    for itself."""

    version: int | None = None
    armed_ms: int | None = None

    def holds(self, state: ArmState) -> bool:
        return self.version == state.version and self.armed_ms == state.armed_ms

    def note(self, state: ArmState) -> None:
        self.version, self.armed_ms = state.version, state.armed_ms


def rule_matches(events: EventBridgeClient, s: Settings, clock: Clock, state: ArmState) -> bool:
    """Is the rule armed as the row says? (A writer may have died between the two.)"""
    return _rule_is(events, s, clock, state.armed_ms)


def apply_rule(events: EventBridgeClient, s: Settings, clock: Clock, armed_ms: int | None) -> None:
    if armed_ms is None:
        call_with_retry(lambda: events.disable_rule(Name=s.rule_name), clock)
        return
    if armed_ms < applicable_minute(armed_ms, clock.now_ms()) and _rule_is(events, s, clock, armed_ms):
        # The armed minute has begun and the rule still holds it: its fire is pending
        # (EventBridge fires anywhere in the minute). Re-putting it, or moving it to the
        # next minute, would cancel that fire; an editor syncing every minute under a
        # steady trickle of inserts postponed the poll again and again (minutes to hours
        # late, found by the benchmark). Leave it; a poll that never came is replaced
        # once it is stale (arm_no_later_than's replace_before_ms).
        return

    def put() -> Any:
        # recomputed on every attempt: backoff moves the clock
        expr = one_shot_cron(applicable_minute(armed_ms, clock.now_ms()))
        return events.put_rule(
            Name=s.rule_name, ScheduleExpression=expr, State="ENABLED", Description=RULE_DESCRIPTION
        )

    call_with_retry(put, clock)


def sync_rule(
    ddb: DynamoDBClient, events: EventBridgeClient, s: Settings, clock: Clock, state: ArmState | None = None, rounds: int = 8
) -> ArmState:
    """Make the rule match the meta row; returns the state that was applied last.

    ``state`` is what the caller just wrote (saves the first read); it is verified
    against the row after applying, like any other.
    """
    state = state or read_arm(ddb, s, clock)
    for _ in range(rounds):
        apply_rule(events, s, clock, state.armed_ms)
        after = read_arm(ddb, s, clock)
        if after.armed_ms == state.armed_ms:
            obs.log("INFO", "rule synced", armed_ms=state.armed_ms,
                    cron=one_shot_cron(state.armed_ms) if state.armed_ms is not None else None)
            return after
        state = after
    raise RuntimeError("rule arming did not converge; the meta row keeps changing")
