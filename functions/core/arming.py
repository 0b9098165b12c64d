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
from typing import Any

from . import observability as obs
from .clock import Clock
from .config import META_ARM_SK, META_PK, RULE_DESCRIPTION, Settings
from .cron import one_shot_cron
from .errors import is_conditional_failure
from .retry import call_with_retry
from .store import conditional_update

_KEY = {"pk": {"S": META_PK}, "sk": {"S": META_ARM_SK}}


@dataclass(frozen=True)
class ArmState:
    armed_ms: int | None  # None: disabled
    version: int  # 0: the meta row does not exist yet


def _state(item: dict[str, Any] | None) -> ArmState:
    if not item:
        return ArmState(None, 0)
    armed = item.get("armed_ms", {}).get("N")
    return ArmState(int(armed) if armed is not None else None, int(item.get("version", {}).get("N", "0")))


def read_arm(ddb: Any, s: Settings, clock: Clock) -> ArmState:
    resp = call_with_retry(
        lambda: ddb.get_item(TableName=s.table_name, Key=_KEY, ConsistentRead=True), clock
    )
    return _state(resp.get("Item"))


def compare_and_set(
    ddb: Any, s: Settings, clock: Clock, expected_version: int, armed_ms: int | None
) -> ArmState | None:
    """Set the arm if nobody wrote since ``expected_version``; None if someone did."""
    names = {"#v": "version", "#a": "armed_ms", "#u": "updated_ms"}
    values: dict[str, Any] = {":next": {"N": str(expected_version + 1)}, ":now": {"N": str(clock.now_ms())}}
    if expected_version == 0:
        cond = "attribute_not_exists(#v)"
    else:
        cond = "#v = :expected"
        values[":expected"] = {"N": str(expected_version)}
    if armed_ms is None:
        update = "SET #v = :next, #u = :now REMOVE #a"
    else:
        update = "SET #v = :next, #u = :now, #a = :armed"
        values[":armed"] = {"N": str(armed_ms)}
    if not conditional_update(
        ddb,
        clock,
        TableName=s.table_name,
        Key=_KEY,
        UpdateExpression=update,
        ConditionExpression=cond,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    ):
        return None
    return ArmState(armed_ms, expected_version + 1)


def arm_no_later_than(
    ddb: Any, s: Settings, clock: Clock, minute_ms: int, replace_before_ms: int
) -> ArmState:
    """Arm for ``minute_ms`` unless an earlier, live arm exists; always bump the version.

    An existing arm is replaced when it is later than ``minute_ms``, or when its
    minute began before ``replace_before_ms`` (it fired already or is dead).
    """
    names = {"#v": "version", "#a": "armed_ms", "#u": "updated_ms"}
    now = {"N": str(clock.now_ms())}
    try:
        resp = call_with_retry(
            lambda: ddb.update_item(
                TableName=s.table_name,
                Key=_KEY,
                UpdateExpression="SET #a = :m, #u = :now ADD #v :one",
                ConditionExpression="attribute_not_exists(#a) OR #a > :m OR #a < :cut",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={
                    ":m": {"N": str(minute_ms)},
                    ":cut": {"N": str(replace_before_ms)},
                    ":one": {"N": "1"},
                    ":now": now,
                },
                ReturnValues="ALL_NEW",
            ),
            clock,
        )
    except Exception as exc:
        if not is_conditional_failure(exc):
            raise
        resp = call_with_retry(
            lambda: ddb.update_item(
                TableName=s.table_name,
                Key=_KEY,
                UpdateExpression="SET #u = :now ADD #v :one",
                ExpressionAttributeNames={"#v": "version", "#u": "updated_ms"},
                ExpressionAttributeValues={":one": {"N": "1"}, ":now": now},
                ReturnValues="ALL_NEW",
            ),
            clock,
        )
    return _state(resp.get("Attributes"))


def apply_rule(events: Any, s: Settings, clock: Clock, armed_ms: int | None) -> None:
    if armed_ms is None:
        call_with_retry(lambda: events.disable_rule(Name=s.rule_name), clock)
    else:
        expr = one_shot_cron(armed_ms)
        call_with_retry(
            lambda: events.put_rule(
                Name=s.rule_name, ScheduleExpression=expr, State="ENABLED", Description=RULE_DESCRIPTION
            ),
            clock,
        )


def sync_rule(
    ddb: Any, events: Any, s: Settings, clock: Clock, state: ArmState | None = None, rounds: int = 8
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
