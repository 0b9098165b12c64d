"""End to end in virtual time (issue 3): rows written raw (cdk-scheduler format) and through
the client travel editor -> delay queue -> consumer -> delivery queue, with the poller run
whenever the armed rule fires; cancellation, crashes at every step, malformed rows.

The AWS model and its latency parameters are in tests/virtual_aws.py: deliveries are
checked against ``step_ms + receive_latency_ms`` (130 ms by default) beyond the later of
their due time and their insertion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from punctual.client import PunctualClient
from punctual.core.models import event_id
from tests.faults import Faults
from tests.support import T0_MS
from tests.virtual_aws import RECEIVE_LATENCY_MS, STEP_MS, VISIBILITY_TIMEOUT_MS, VirtualAws

SECOND, MINUTE, HOUR, DAY = 1000, 60_000, 3_600_000, 86_400_000
LATENCY = STEP_MS + RECEIVE_LATENCY_MS  # the modelled worst case for a clean delivery

HORIZONS = {  # name -> due, relative to the insertion (T0)
    "300ms": 300,
    "5s": 5 * SECOND,
    "14min": 14 * MINUTE,
    "16min": 16 * MINUTE,
    "3days": 3 * DAY,
    "past1h": -HOUR,
}


@dataclass(frozen=True)
class Expected:
    key: str
    due_ms: int
    payload: dict[str, Any]
    written_ms: int

    @property
    def earliest_ms(self) -> int:
        """When it could be delivered at best: its due time, or its insertion if past due."""
        return max(self.due_ms, self.written_ms)


def put_row(stack, due_ms: int, task_id: str, payload_av: dict[str, Any]) -> str:
    """A row exactly as a cdk-scheduler user writes it with boto3: pk, sk, payload (M)."""
    key = f"{due_ms:013d}#{task_id}"
    stack.ddb.put_item(TableName=stack.settings.table_name, Item={
        "pk": {"S": "scheduler"}, "sk": {"S": key}, "payload": {"M": payload_av}})
    return key


def raw_payload(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(DynamoDB JSON as written, the plain JSON the delivery must carry)."""
    av = {"name": {"S": name}, "n": {"N": "42"}, "ratio": {"N": "1.5"}, "ok": {"BOOL": True},
          "nothing": {"NULL": True}, "tags": {"L": [{"S": "a"}, {"N": "2"}]},
          "nested": {"M": {"deep": {"M": {"x": {"S": "y"}}}}}}
    plain = {"name": name, "n": 42, "ratio": 1.5, "ok": True, "nothing": None, "tags": ["a", 2],
             "nested": {"deep": {"x": "y"}}}
    return av, plain


def client_of(stack) -> PunctualClient:
    return PunctualClient(stack.settings.table_name, ddb=stack.ddb, clock=stack.deps.clock)


def by_key(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(e["key"], []).append(e)
    return out


def check_deliveries(events: list[dict[str, Any]], expected: dict[str, Expected], *, max_late_ms: int,
                     duplicates: frozenset[str] = frozenset()) -> None:
    """Every expected row delivered, never early, within ``max_late_ms`` of its earliest
    possible delivery, with its payload and stable event id; exactly once except the
    keys in ``duplicates`` (delivered more than once, each copy the same event)."""
    got = by_key(events)
    assert set(got) == set(expected), f"missing {set(expected) - set(got)}, unexpected {set(got) - set(expected)}"
    for key, copies in got.items():
        exp = expected[key]
        if key in duplicates:
            assert len(copies) >= 2, f"{key}: expected a duplicate"
        else:
            assert len(copies) == 1, f"{key}: delivered {len(copies)} times"
        for e in copies:
            assert e["event_id"] == event_id("scheduler", key), "stable event id"
            assert e["due_ms"] == exp.due_ms and e["payload"] == exp.payload
            assert e["delivered_at_ms"] >= e["due_ms"], f"{key}: early by {e['due_ms'] - e['delivered_at_ms']} ms"
            assert e["lateness_ms"] == e["delivered_at_ms"] - e["due_ms"]
            assert e["delivered_at_ms"] - exp.earliest_ms <= max_late_ms, (
                f"{key}: {e['delivered_at_ms'] - exp.earliest_ms} ms after it could be delivered")


def assert_clean(sim: VirtualAws, stack) -> None:
    assert sim.log.errors == [] and sim.log.crashes == [] and sim.log.violations == []
    assert stack.drain(stack.delay_dlq_url) == [] and stack.drain(stack.delivery_dlq_url) == []


# -- 1. every horizon, raw and through the client ------------------------------------------


@pytest.mark.parametrize("fire_offset_ms", [2_000, 58_000], ids=["rule-fires-2s-in", "rule-fires-58s-in"])
def test_every_horizon_raw_and_client_delivered_once_on_time(stack, frozen, fire_offset_ms):
    sim = VirtualAws.over_moto(stack, frozen, fire_offset_ms=fire_offset_ms)
    client = client_of(stack)
    expected: dict[str, Expected] = {}
    for name, offset in HORIZONS.items():
        av, plain = raw_payload(f"raw-{name}")
        key = put_row(stack, T0_MS + offset, f"raw-{name}", av)
        expected[key] = Expected(key, T0_MS + offset, plain, T0_MS)
        payload = {"name": f"client-{name}", "list": [1, 2.5, "x", None, {"k": False}], "empty": {}}
        task = client.schedule(T0_MS + offset, payload, id=f"client-{name}")
        expected[task.key] = Expected(task.key, T0_MS + offset, payload, T0_MS)

    got = sim.settle(3 * DAY + HOUR)
    check_deliveries(got, expected, max_late_ms=LATENCY)
    # rows due in the window went through the editor's fast path, visible ~1 s early: on the ms
    on_time = [e for e in got if e["due_ms"] >= T0_MS + SECOND]
    assert on_time and all(e["lateness_ms"] == 0 for e in on_time), [e["lateness_ms"] for e in on_time]
    assert all(e["attempt"] == 1 for e in got)
    for e in got:  # the documented event format
        assert e["id"] == e["key"].split("#", 1)[1] and e["publicationTimestamp"] == e["due_ms"]
        assert e["due"].endswith("Z") and e["delivered_at"].endswith("Z")
    assert_clean(sim, stack)
    # the far rows came through the rule; the rule stayed idle-ish (no poll storm over 3 days)
    assert 1 <= len(sim.log.polls) <= 8, sim.log.polls
    assert stack.rule()["State"] == "DISABLED"


# -- 2. cancel and reschedule, before and after the delay queue -----------------------------


def test_cancel_and_reschedule_before_the_row_reached_the_delay_queue(stack, frozen):
    sim = VirtualAws.over_moto(stack, frozen)
    client = client_of(stack)
    doomed = client.schedule(T0_MS + 3 * DAY, {"n": "cancelled"}, id="cancelled")
    av, plain = raw_payload("moved")
    old_key = put_row(stack, T0_MS + 3 * DAY, "moved", av)
    sim.run_for(STEP_MS)  # the editor saw both and armed the rule for the far future
    assert not client.get(doomed).in_flight and not client.get(old_key).in_flight
    assert sim.log.polls == [] and sim.log.invocations["editor"] >= 1

    client.cancel(doomed)
    moved = client.reschedule(old_key, T0_MS + 20 * SECOND)
    got = sim.settle(3 * DAY + HOUR)
    check_deliveries(got, {moved.key: Expected(moved.key, T0_MS + 20 * SECOND, plain, sim.now)},
                     max_late_ms=LATENCY)
    assert got[0]["lateness_ms"] == 0  # the editor sent it ~1 s early; the consumer waited to the ms
    assert_clean(sim, stack)


def test_cancel_and_reschedule_after_the_row_reached_the_delay_queue(stack, frozen):
    sim = VirtualAws.over_moto(stack, frozen)
    client = client_of(stack)
    doomed = client.schedule(T0_MS + 5 * SECOND, {"n": "cancelled"}, id="cancelled")
    av, plain = raw_payload("moved")
    old_key = put_row(stack, T0_MS + 5 * SECOND, "moved", av)
    keep = client.schedule(T0_MS + 5 * SECOND, {"n": "kept"}, id="kept")  # same due, same batch
    sim.run_for(STEP_MS)
    assert client.get(doomed).in_flight and client.get(old_key).in_flight, "claimed and in the delay queue"
    assert sim.log.polls == []

    client.cancel(doomed)
    moved = client.reschedule(old_key, T0_MS + 30 * SECOND)
    now = sim.now
    got = sim.settle(HOUR)
    check_deliveries(got, {
        moved.key: Expected(moved.key, T0_MS + 30 * SECOND, plain, now),
        keep.key: Expected(keep.key, keep.due_ms, keep.payload, T0_MS),
    }, max_late_ms=LATENCY)
    assert all(e["lateness_ms"] == 0 for e in got)
    # the old messages were received at the old time and dropped (acked, not dead-lettered)
    assert sim.log.invocations["consumer"] >= 2
    assert_clean(sim, stack)


# -- 3. a crash at each step of the consumer and of the editor -------------------------------

BAD_KEY = f"{T0_MS + 2 * SECOND:013d}#bad"


def crash_scenario(stack) -> tuple[dict[str, Expected], list[str]]:
    """Three valid rows and a malformed one, all in the editor's first batch. Returns the
    expectations and the keys in clean delivery order (one consumer group each)."""
    client = client_of(stack)
    past = put_row(stack, T0_MS - HOUR, "past", {"n": {"S": "past"}})
    stack.ddb.put_item(TableName=stack.settings.table_name, Item={
        "pk": {"S": "scheduler"}, "sk": {"S": BAD_KEY}, "payload": {"S": "not a map"}})
    soon = put_row(stack, T0_MS + 300, "soon", {"n": {"N": "3"}})
    five = client.schedule(T0_MS + 5 * SECOND, {"n": "five"}, id="five")
    expected = {past: Expected(past, T0_MS - HOUR, {"n": "past"}, T0_MS),
                soon: Expected(soon, T0_MS + 300, {"n": 3}, T0_MS),
                five.key: Expected(five.key, five.due_ms, five.payload, T0_MS)}
    return expected, [past, soon, five.key]


# The AWS calls of a clean run (test_clean_run_makes_exactly_these_calls keeps these true).
# Editor, first batch: reject the bad row (read it as it is now, queue the rejection, delete
# it), claim the three valid rows, send them, read the meta row (nothing armed yet, so it
# must arm), arm the rule, apply it, read the meta row back.
EDITOR_CALLS = ["GetItem", "SendMessage", "DeleteItem", "UpdateItem", "UpdateItem", "UpdateItem",
                "SendMessageBatch", "GetItem", "UpdateItem", "PutRule", "GetItem"]
# Consumer: past and soon arrive in one batch (two runs), five alone: fence the run's due second
# (UpdateItem of its fence item), read the run's rows (a consistent Query), deliver, delete them
# while each is still the send delivered (a run of one row: a conditional DeleteItem; of more,
# TransactWriteItems of conditional Deletes), before the wait for the next run.
CONSUMER_CALLS = ["UpdateItem", "Query", "SendMessageBatch", "DeleteItem"] * 3


def numbered(calls: list[str]) -> list[tuple[str, int]]:
    seen: dict[str, int] = {}
    out = []
    for op in calls:
        seen[op] = seen.get(op, 0) + 1
        out.append((op, seen[op]))
    return out


CRASH_POINTS = [
    pytest.param(fn, when, op, nth, id=f"{fn}-{when}-{op}#{nth}")
    for fn, calls in (("editor", EDITOR_CALLS), ("consumer", CONSUMER_CALLS))
    for op, nth in numbered(calls)
    for when in ("before", "after")
]


def function_faults(sim: VirtualAws, fn: str) -> Faults:
    deps = sim.isolate(fn)
    return Faults(deps.ddb, deps.sqs, deps.events)


def test_clean_run_makes_exactly_these_calls(stack, frozen):
    sim = VirtualAws.over_moto(stack, frozen)
    recorders = {fn: function_faults(sim, fn) for fn in ("editor", "consumer")}
    expected, order = crash_scenario(stack)
    got = sim.settle(HOUR)
    assert [c.removeprefix("after:") for c in recorders["editor"].calls] == EDITOR_CALLS
    assert [c.removeprefix("after:") for c in recorders["consumer"].calls] == CONSUMER_CALLS
    check_deliveries(got, expected, max_late_ms=LATENCY)
    assert [e["key"] for e in got] == order
    assert [(r["sk"], r["code"]) for r in sim.log.rejected] == [(BAD_KEY, "payload_not_map")]
    assert_clean(sim, stack)


def test_clean_run_has_no_duplicates_with_the_same_event_id(stack, frozen):
    """Sanity for the assertion below: dedup by event_id finds nothing when nothing crashed."""
    sim = VirtualAws.over_moto(stack, frozen)
    crash_scenario(stack)
    got = sim.settle(HOUR)
    assert len({e["event_id"] for e in got}) == len(got) == 3


@pytest.mark.parametrize(("fn", "when", "op", "nth"), CRASH_POINTS)
def test_crash_at_each_step_loses_nothing(stack, frozen, fn, when, op, nth):
    sim = VirtualAws.over_moto(stack, frozen)
    faults = function_faults(sim, fn)
    (faults.crash_before if when == "before" else faults.crash_after)(op, nth)
    expected, order = crash_scenario(stack)

    got = sim.settle(HOUR)

    assert len(sim.log.crashes) == 1 and sim.log.crashes[0].startswith(f"{fn}: crash {when} {op} #{nth}")
    assert sim.log.errors == [] and sim.log.violations == []
    if fn == "consumer":
        # The batch comes back after the visibility timeout. A duplicate only when the crash
        # fell between a group's delivery and the delete of its row.
        dups = {order[nth - 1]} if (when, op) in {("after", "SendMessageBatch"), ("before", "DeleteItem")} else set()
        max_late = VISIBILITY_TIMEOUT_MS + LATENCY
    else:
        # The stream retries the batch; a row claimed but never sent is an orphan, resent by
        # the poll armed for after its grace period.
        dups = set()
        s = stack.settings
        max_late = s.orphan_grace_ms + MINUTE + sim.fire_offset_ms + 2 * LATENCY
    check_deliveries(got, expected, max_late_ms=max_late, duplicates=frozenset(dups))
    # the malformed row is rejected with its reason; twice only if the editor died in between
    twice = fn == "editor" and (when, op, nth) in {("after", "SendMessage", 1), ("before", "DeleteItem", 1)}
    assert [(r["sk"], r["code"]) for r in sim.log.rejected] == [(BAD_KEY, "payload_not_map")] * (2 if twice else 1)
    assert all(r["reason"] for r in sim.log.rejected)
    assert stack.drain(stack.delay_dlq_url) == [] and stack.drain(stack.delivery_dlq_url) == []


# The poller (beyond issue 3's list, same invariant 2): a crash at each call of its first poll
# (rows it sends: two due after the editor's window; one far; one past due sent by the editor).
POLLER_CALLS = ["UpdateItem", "PutRule", "GetItem",  # safety-net arm, applied, read back
                "Query", "UpdateItem", "UpdateItem", "SendMessageBatch",  # window, claims, send
                "Query", "UpdateItem", "PutRule", "GetItem"]  # next unsent row, compare-and-set, apply


def poller_scenario(stack) -> dict[str, Expected]:
    expected = {}
    for name, offset in (("past", -HOUR), ("16min", 16 * MINUTE), ("17min", 17 * MINUTE), ("3days", 3 * DAY)):
        key = put_row(stack, T0_MS + offset, name, {"n": {"S": name}})
        expected[key] = Expected(key, T0_MS + offset, {"n": name}, T0_MS)
    return expected


def test_poller_clean_run_makes_exactly_these_calls(stack, frozen):
    sim = VirtualAws.over_moto(stack, frozen)
    recorder = function_faults(sim, "poller")
    expected = poller_scenario(stack)
    sim.run_until(T0_MS + 10 * MINUTE)
    assert len(sim.log.polls) == 1
    assert [c.removeprefix("after:") for c in recorder.calls] == POLLER_CALLS
    sim.settle(3 * DAY + HOUR)
    check_deliveries(sim.delivered, expected, max_late_ms=LATENCY)
    assert_clean(sim, stack)


@pytest.mark.parametrize(("when", "op", "nth"), [
    pytest.param(when, op, nth, id=f"poller-{when}-{op}#{nth}")
    for op, nth in numbered(POLLER_CALLS) for when in ("before", "after")])
def test_poller_crash_at_each_step_loses_nothing(stack, frozen, when, op, nth):
    sim = VirtualAws.over_moto(stack, frozen)
    faults = function_faults(sim, "poller")
    (faults.crash_before if when == "before" else faults.crash_after)(op, nth)
    expected = poller_scenario(stack)

    sim.settle(3 * DAY + HOUR)

    assert len(sim.log.crashes) == 1 and sim.log.crashes[0].startswith(f"poller: crash {when} {op} #{nth}")
    assert sim.log.errors == [] and sim.log.violations == []
    # Recovery: Lambda's retry of the failed invocation, the safety-net poll armed first, or
    # (a row claimed but not sent) the orphan check after the grace period.
    max_late = stack.settings.orphan_grace_ms + MINUTE + sim.fire_offset_ms + 2 * LATENCY
    check_deliveries(sim.delivered, expected, max_late_ms=max_late)
    assert stack.drain(stack.delay_dlq_url) == [] and stack.drain(stack.delivery_dlq_url) == []


# -- 4. malformed rows in the same stream batch as valid rows --------------------------------


def test_malformed_rows_rejected_with_their_reason_valid_rows_of_the_batch_delivered(stack, frozen):
    from tests.functional.test_editor_stream import MALFORMED, put_item  # the catalogue (>= 15 kinds)

    sim = VirtualAws.over_moto(stack, frozen)
    client = client_of(stack)
    expected: dict[str, Expected] = {}
    for name, offset in (("past1h", -HOUR), ("300ms", 300), ("16min", 16 * MINUTE)):
        key = put_row(stack, T0_MS + offset, f"raw-{name}", {"n": {"S": name}})
        expected[key] = Expected(key, T0_MS + offset, {"n": name}, T0_MS)
    for sk_value, payload, _, pk in MALFORMED:
        put_item(stack, sk_value, payload, pk)
    task = client.schedule(T0_MS + 5 * SECOND, {"n": "client"}, id="client")
    expected[task.key] = Expected(task.key, task.due_ms, task.payload, T0_MS)

    sim.step()  # one stream batch with everything
    assert sim.log.invocations["editor"] == 1 and sim.log.errors == []
    rejected = {r["sk"]: r for r in sim.log.rejected}
    assert len(sim.log.rejected) == len(rejected) == len(MALFORMED)
    for sk_value, _, code, pk in MALFORMED:
        r = rejected[sk_value]
        assert (r["code"], r["source"], r["pk"]) == (code, "editor", pk or "scheduler"), sk_value
        assert r["reason"] and r["rejected_at"]

    sim.settle(HOUR)
    check_deliveries(sim.delivered, expected, max_late_ms=LATENCY)
    assert len(sim.log.rejected) == len(MALFORMED), "each rejected once"
    assert_clean(sim, stack)
