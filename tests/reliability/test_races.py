"""Races: hypothesis interleaves editor inserts, cancellations, reschedules and poller runs.

The real handler code runs, one thread per actor, against the in-memory fake
(:mod:`tests.reliability.fakeaws`); hypothesis chooses which actor makes its next
AWS call and how far virtual time moves between calls (minute boundaries are
crossed on purpose). At quiescence the arming invariant (invariant 6, docs/architecture.md) is checked,
then the world runs on (rule firings, consumer) and invariants 1, 2, 4, 5 are
checked on what was delivered.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from punctual.core import observability as obs
from punctual.core.arming import APPLY_MARGIN_MS, applicable_minute, read_arm
from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.cron import ARM_MARGIN_MS, MINUTE_MS, floor_minute, next_minute_after
from punctual.core.keys import encode_sk
from punctual.core.models import ATTR_DIRECT, ATTR_ENQUEUED_MS, item_key
from punctual.core.runtime import Deps
from punctual.core.usecases.poll import poll
from punctual.core.usecases.process_stream import process_stream
from tests.reliability.fakeaws import GatedAws
from tests.reliability.interleave import Interleaver
from tests.virtual_aws import VirtualAws

T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z
DAY = 86_400_000
SETTINGS = Settings(delay_queue_url="q/delay", delivery_queue_url="q/delivery", rejected_queue_url="q/rejected",
                    send_workers=1)
# two shards (docs/architecture.md, "Shards"): task-0, task-1, ... fall in both
SHARDED = replace(SETTINGS, shards=2)
# direct delivery (docs/architecture.md, "Direct delivery"): the poller and the editor send the events
DIRECT = replace(SETTINGS, delivery="direct")
# what a cancel's or a reschedule's delete requires of the row (client._delete_op): it exists and, in
# direct delivery, is not sent already (its claim marks it)
_PENDING = {"ConditionExpression": "attribute_exists(sk) AND attribute_not_exists(#d)",
            "ExpressionAttributeNames": {"#d": ATTR_DIRECT}}

# due offsets from "now": past, inside the window, around its end, beyond, far away
DUE_OFFSETS = st.one_of(
    st.sampled_from([-3_600_000, -1, 0, 1, 999, 59_999, 60_000, 120_000, 899_999, 900_000, 900_001,
                     960_000, 1_020_000, 3_600_000, DAY]),
    st.integers(-600_000, 2 * DAY),
)
TICKS = st.sampled_from([0, 0, 0, 1, 37, 500, 999, 1_000, 15_000, 59_999])


@dataclass
class Ctx:
    aws: GatedAws
    clock: ManualClock
    deps: Deps
    expected: dict[str, int] = field(default_factory=dict)
    ready: dict[str, int] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    ids: itertools.count = field(default_factory=itertools.count)
    seq: itertools.count = field(default_factory=lambda: itertools.count(1_000_000))

    def new_sk(self, due_ms: int) -> str:
        return encode_sk(due_ms, f"task-{next(self.ids)}")

    @property
    def settings(self) -> Settings:
        return self.deps.settings

    def key(self, sk: str) -> dict[str, Any]:
        return {"pk": {"S": self.settings.partition_for_key(sk)}, "sk": {"S": sk}}

    def item(self, sk: str) -> dict[str, Any]:
        return {**self.key(sk), "payload": {"M": {"n": {"S": sk}}}}

    def record(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"eventID": str(next(self.seq)), "eventName": "INSERT", "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/punctual/stream/x",
                "dynamodb": {"Keys": item_key(item), "NewImage": item,
                             "SequenceNumber": str(next(self.seq)), "StreamViewType": "NEW_AND_OLD_IMAGES"}}


def make_ctx(start_ms: int, s: Settings = SETTINGS) -> Ctx:
    clock = ManualClock(start_ms)
    aws = GatedAws(clock)
    return Ctx(aws, clock, Deps(s, clock, aws.ddb, aws.sqs, aws.events))


def insert(ctx: Ctx, due_ms: int):
    sk = ctx.new_sk(due_ms)

    def run() -> None:
        item = ctx.item(sk)
        ctx.deps.ddb.put_item(TableName=ctx.settings.table_name, Item=item)
        ctx.expected[sk] = due_ms
        ctx.ready[sk] = max(due_ms, ctx.clock.now_ms())
        process_stream({"Records": [ctx.record(item)]}, ctx.deps)

    return run


def cancel(ctx: Ctx, sk: str):
    def run() -> None:
        # in direct delivery, as the client does it (a cancel after the send loses: AlreadyEnqueued)
        ctx.deps.ddb.delete_item(TableName=ctx.settings.table_name, Key=ctx.key(sk),
                                 **(_PENDING if ctx.settings.direct else {}))
        ctx.expected.pop(sk, None)
        ctx.cancelled.add(sk)

    return run


def reschedule(ctx: Ctx, sk: str, due_ms: int):
    new = ctx.new_sk(due_ms)

    def run() -> None:
        item = ctx.item(new)
        ctx.deps.ddb.transact_write_items(TransactItems=[
            {"Delete": {"TableName": ctx.settings.table_name, "Key": ctx.key(sk),
                        **(_PENDING if ctx.settings.direct else {"ConditionExpression": "attribute_exists(sk)"})}},
            {"Put": {"TableName": ctx.settings.table_name, "Item": item}},
        ])
        ctx.expected.pop(sk, None)
        ctx.cancelled.add(sk)
        ctx.expected[new] = due_ms
        ctx.ready[new] = max(due_ms, ctx.clock.now_ms())
        process_stream({"Records": [ctx.record(item)]}, ctx.deps)

    return run


def run_poll(ctx: Ctx):
    return lambda: poll(ctx.deps)


@st.composite
def scenarios(draw):
    start = T0 + draw(st.sampled_from([0, 1, 30_000, 59_000, 59_900, 59_999])) + draw(st.integers(0, 3)) * MINUTE_MS
    pre = draw(st.lists(DUE_OFFSETS, max_size=3))
    acts = draw(st.lists(
        st.one_of(
            st.tuples(st.just("insert"), DUE_OFFSETS),
            st.tuples(st.just("cancel"), st.integers(0, 5)),
            st.tuples(st.just("reschedule"), st.integers(0, 5), DUE_OFFSETS),
            st.tuples(st.just("poll")),
        ),
        min_size=2, max_size=5,
    ))
    return start, pre, acts


def check_arming(ctx: Ctx) -> None:
    """Invariant 6 at quiescence, and on every PutRule made during the race."""
    s, now = ctx.settings, ctx.clock.now_ms()
    for call in ctx.aws.rule_calls:
        if call.armed_ms is not None:
            # PutRule is issued at least APPLY_MARGIN_MS before the minute it arms (it lands within that)
            assert call.armed_ms >= call.issued_ms + APPLY_MARGIN_MS, f"rule armed for a started minute: {call}"
    meta = read_arm(ctx.deps.ddb, s, ctx.clock)
    armed = ctx.aws.armed
    last_call = ctx.aws.rule_calls[-1].issued_ms if ctx.aws.rule_calls else now
    if meta.armed_ms is None:
        assert armed is None, f"rule armed at {armed} while the meta row says disabled"
    else:
        # the rule is the meta row's minute, or the next safe one if that had begun when applied
        assert armed is not None and armed == applicable_minute(meta.armed_ms, last_call), (armed, meta, last_call)
    for (pk, sk), item in ctx.aws.items.items():
        if pk not in s.partitions:
            continue
        due = int(sk[:13])
        if ATTR_ENQUEUED_MS not in item:
            # an unsent row: a poll must start by due - lead, or in the first minute a poll or an editor
            # may arm (one beginning ARM_MARGIN_MS or more after it decides: a poll that ran past
            # due - lead arms the next minute: the row, due over a lead later, is still read in time)
            bound = max(floor_minute(due - s.lead_ms), next_minute_after(last_call + ARM_MARGIN_MS))
            assert armed is not None, f"unsent row {sk} pending with the rule disabled"
            assert armed <= bound, f"rule armed at {armed - T0} later than {bound - T0} for {sk} (now {now - T0})"
        else:
            assert armed is not None, f"row {sk} in flight with no poll to follow (orphan would be lost)"


def run_scenario(start: int, pre: list[int], acts: list[tuple], data, s: Settings = SETTINGS) -> Ctx:
    ctx = make_ctx(start, s)
    fire_offset_ms = data.draw(st.sampled_from([0, 1_000, 30_000, 59_999]), label="fire offset")
    world = VirtualAws.over_fake(ctx.deps, ctx.aws, ctx.clock, fire_offset_ms=fire_offset_ms)
    # steady state before the race: pre-existing rows, written and processed
    for off in pre:
        insert(ctx, start + off)()
    keys = list(ctx.expected)
    actors: dict[str, Any] = {}
    for i, act in enumerate(acts):
        kind = act[0]
        if kind == "insert":
            actors[f"{i}-insert"] = insert(ctx, start + act[1])
        elif kind == "poll":
            actors[f"{i}-poll"] = run_poll(ctx)
        elif keys:
            sk = keys[act[1] % len(keys)]
            if kind == "cancel":
                actors[f"{i}-cancel"] = cancel(ctx, sk)
            else:
                actors[f"{i}-resched"] = reschedule(ctx, sk, start + act[2])
    lanes = Interleaver()
    ctx.aws.gate = lanes.gate
    ticks = [0]

    def between() -> None:
        tick = data.draw(TICKS, label="tick")
        ticks.append(tick)
        ctx.clock.advance_ms(tick)

    ran = lanes.run(actors, choose=lambda ready: data.draw(st.sampled_from(ready), label="next"), between=between)
    ctx.aws.gate = lambda op: None
    note("trace: " + " ".join(lanes.trace))
    note("rule calls: " + repr([(c.issued_ms - T0, c.armed_ms and c.armed_ms - T0) for c in ctx.aws.rule_calls]))
    for a in ran.values():
        if a.error is not None and not _benign(a.error):
            raise a.error
    check_arming(ctx)
    race_end = ctx.clock.now_ms()
    world.skip_stream()  # the race's stream records were handed to the editor directly
    world.run_until(race_end + 3 * DAY, stop=world.idle)
    out = world.outcome(ctx.expected, ctx.cancelled,
                        ready={k: max(v, race_end) for k, v in ctx.ready.items()})
    assert not out.errors, out.errors
    assert out.lost == [], f"lost {out.lost}"
    assert out.early == [], f"early {out.early}"
    assert out.unexpected == [], f"cancelled/rescheduled rows delivered: {out.unexpected}"
    assert out.split_ids == []
    assert out.duplicates == 0, "a duplicate without any crash"
    # DelaySeconds is rounded up (planning.delay_seconds: < 1 s) and virtual time may pass between
    # computing a delay and SQS receiving it (other actors run meanwhile): nothing else may make a
    # delivery late (arming mistakes are checked directly above); direct delivery's timed events are
    # planned its early margin after due.
    margin = ctx.settings.direct_early_margin_ms if ctx.settings.direct else 0
    assert out.max_lateness_ms <= 1_000 + margin + sum(ticks), f"late by {out.max_lateness_ms} ms"
    return ctx


def _benign(exc: BaseException) -> bool:
    # a reschedule of a row the consumer already delivered fails its condition: that is the API's
    # answer; so does, in direct delivery, a cancel of a row sent already
    return type(exc).__name__ == "ClientError" and ("TransactionCanceled" in str(exc)
                                                    or "ConditionalCheckFailed" in str(exc))


@pytest.fixture(autouse=True)
def quiet_logs():
    import io

    buf = io.StringIO()
    obs.set_stream(buf)
    yield buf
    obs.set_stream(None)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios(), st.data())
def test_arming_and_delivery_under_interleavings(scenario, data):
    start, pre, acts = scenario
    run_scenario(start, pre, acts, data)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios(), st.data())
def test_arming_and_delivery_under_interleavings_with_two_shards(scenario, data):
    """The same races with the tasks spread over two partitions, which the poller reads together."""
    start, pre, acts = scenario
    ctx = run_scenario(start, pre, acts, data, SHARDED)
    assert {pk for pk, _ in ctx.aws.items} <= {*SHARDED.partitions, "__punctual__"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios(), st.data())
def test_arming_and_delivery_under_interleavings_in_direct_delivery(scenario, data):
    """The same races in direct delivery: the poller and the editor send each event themselves,
    and a cancel or reschedule loses once the row is claimed (its delete's condition), so no
    cancelled task is delivered, none is lost, none early, no duplicate without a crash."""
    start, pre, acts = scenario
    run_scenario(start, pre, acts, data, DIRECT)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 179_999), st.lists(st.tuples(DUE_OFFSETS, TICKS), min_size=1, max_size=4), st.data())
def test_editor_vs_poller_only(offset, inserts, data):
    """The hardest pair: editors moving the arm earlier while a poll compares-and-sets."""
    start = T0 + offset
    run_scenario(start, [], [("poll",)] + [("insert", due) for due, _ in inserts], data)


@pytest.mark.long
@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios(), st.data())
def test_arming_and_delivery_under_interleavings_long(scenario, data):
    start, pre, acts = scenario
    run_scenario(start, pre, acts, data)
