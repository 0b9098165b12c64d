"""Editor stream handler against moto's real DynamoDB stream, in virtual time."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from punctual.client import PunctualClient
from punctual.core.arming import RuleSeen, arm_no_later_than, compare_and_set, read_arm
from punctual.core.config import META_PK
from punctual.core.cron import minute_not_after, minute_not_before, one_shot_cron
from punctual.core.models import ATTR_ATTEMPT, ATTR_CLAIM, ATTR_ENQUEUED_MS, RowSend, send_mark
from punctual.core.usecases.poll import poll
from punctual.core.usecases.process_stream import process_stream
from tests.faults import Faults, InjectedCrash
from tests.functional.helpers import sk_at
from tests.support import T0_MS, StreamReader, pointers_of

DAY = 86_400_000


class Sent:
    """Captures the Entries of every SendMessageBatch (to read DelaySeconds)."""

    def __init__(self, sqs):
        self.entries: list[dict] = []
        sqs.meta.events.register("provide-client-params.sqs.SendMessageBatch", self._grab)

    def _grab(self, params, **_):
        self.entries += params.get("Entries", [])


@pytest.fixture
def reader(stack):
    return StreamReader(stack)


def run(stack, reader):
    return process_stream(reader.event(), stack.deps)


def delay_bodies(stack, tick_s: float = 901):
    stack.deps.clock.frozen.tick(tick_s)
    return stack.pointers(stack.settings.delay_queue_url)


def test_row_due_in_5s_is_enqueued_at_once_with_its_delay(stack, reader):
    sent = Sent(stack.sqs)
    stack.put_raw(sk_at(T0_MS + 5000, "a"), {"x": "1"})
    assert run(stack, reader) == {"batchItemFailures": []}
    # visible up to wake_early_ms (1.2 s) before due, here ceil(3.8 s): 0.2 s; the consumer waits the rest
    assert stack.settings.wake_early_ms == 1200
    assert [e["DelaySeconds"] for e in sent.entries] == [4]
    stack.deps.clock.frozen.tick(3.5)
    assert stack.drain(stack.settings.delay_queue_url) == []  # not visible before its delay
    stack.deps.clock.frozen.tick(0.6)
    (body,) = stack.bodies(stack.settings.delay_queue_url)
    assert body["sk"] == sk_at(T0_MS + 5000, "a") and body["due_ms"] == T0_MS + 5000 and body["attempt"] == 1
    (row,) = stack.rows()
    assert row[ATTR_ENQUEUED_MS]["N"] == str(T0_MS)
    # a poll follows the orphan check, in case the message is lost
    expected = minute_not_before(T0_MS + 5000 + stack.settings.orphan_grace_ms, T0_MS)
    assert read_arm(stack.ddb, stack.settings, stack.deps.clock).armed_ms == expected
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(expected)


def test_past_due_row_is_sent_with_no_delay(stack, reader):
    sent = Sent(stack.sqs)
    stack.put_raw(sk_at(T0_MS - 3_600_000, "late"), {"x": "1"})
    assert run(stack, reader) == {"batchItemFailures": []}
    assert [e["DelaySeconds"] for e in sent.entries] == [0]


def test_row_due_in_3_days_arms_the_rule_and_sends_nothing(stack, reader):
    due = T0_MS + 3 * DAY
    stack.put_raw(sk_at(due, "far"), {"x": "1"})
    assert run(stack, reader) == {"batchItemFailures": []}
    minute = minute_not_after(due - stack.settings.lead_ms, T0_MS)
    state = read_arm(stack.ddb, stack.settings, stack.deps.clock)
    assert state.armed_ms == minute and state.version >= 1
    rule = stack.rule()
    assert rule["ScheduleExpression"] == one_shot_cron(minute) and rule["State"] == "ENABLED"
    assert delay_bodies(stack) == []
    assert ATTR_ENQUEUED_MS not in stack.rows()[0]


def test_earlier_row_rearms_earlier_and_later_row_never_later(stack, reader):
    s = stack.settings
    stack.put_raw(sk_at(T0_MS + 3 * DAY, "a"), {"x": "1"})
    run(stack, reader)
    v1 = read_arm(stack.ddb, s, stack.deps.clock)

    stack.put_raw(sk_at(T0_MS + 1 * DAY, "b"), {"x": "1"})
    run(stack, reader)
    earlier = minute_not_after(T0_MS + DAY - s.lead_ms, T0_MS)
    v2 = read_arm(stack.ddb, s, stack.deps.clock)
    assert v2.armed_ms == earlier and v2.version > v1.version
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(earlier)

    stack.put_raw(sk_at(T0_MS + 2 * DAY, "c"), {"x": "1"})
    run(stack, reader)
    v3 = read_arm(stack.ddb, s, stack.deps.clock)
    assert v3.armed_ms == earlier, "a later row must never move the arm later"
    assert v3.version == v2.version, "an arm that already covers the row, no poll running: no write"
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(earlier)


def test_row_arriving_during_a_poll_bumps_the_version_so_the_poll_replans(stack, reader):
    """A poll in progress (it marked polling_ms when it armed its safety net) may have read the
    table before this row: the editor must write, so the poll's compare-and-set fails."""
    from punctual.core.arming import arm_no_later_than

    s, clock = stack.settings, stack.deps.clock
    stack.put_raw(sk_at(T0_MS + 3 * DAY, "a"), {"x": "1"})
    run(stack, reader)
    before = read_arm(stack.ddb, s, clock)
    assert before.polling_ms is None
    polling = arm_no_later_than(stack.ddb, s, clock, before.armed_ms, replace_before_ms=T0_MS,
                                polling_since_ms=T0_MS)
    assert polling.polling_ms == T0_MS and polling.armed_ms == before.armed_ms
    stack.put_raw(sk_at(T0_MS + 4 * DAY, "b"), {"x": "1"})  # later: the arm already covers it
    run(stack, reader)
    after = read_arm(stack.ddb, s, clock)
    assert after.armed_ms == before.armed_ms and after.version > polling.version


def test_rule_out_of_step_with_the_meta_row_is_repaired(stack, reader):
    """A writer that moved the arm in the meta row and died before PutRule leaves the rule behind
    the row; the next editor batch that relies on the row checks the rule (the row's version is
    new to it) and re-applies it."""
    s, clock = stack.settings, stack.deps.clock
    stack.put_raw(sk_at(T0_MS + 3 * DAY, "a"), {"x": "1"})
    run(stack, reader)
    later = read_arm(stack.ddb, s, clock).armed_ms
    earlier = minute_not_after(T0_MS + 2 * DAY, T0_MS)
    arm_no_later_than(stack.ddb, s, clock, earlier, replace_before_ms=T0_MS)  # ... and died here
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(later)
    stack.put_raw(sk_at(T0_MS + 4 * DAY, "b"), {"x": "1"})
    run(stack, reader)
    assert stack.rule()["State"] == "ENABLED"
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(earlier)


class Described:
    """Counts DescribeRule calls (EventBridge control plane, rate-limited per account)."""

    def __init__(self, events):
        self.calls = 0
        events.meta.events.register("provide-client-params.events.DescribeRule", self._count)

    def _count(self, **_):
        self.calls += 1


def test_editor_asks_eventbridge_once_per_arm_change_not_per_batch(stack, reader):
    """Invariant 7: control-plane calls per arm change, never per task. An environment that saw the
    rule hold the meta row's arm trusts it until the row's version changes; another environment
    (its own Deps) checks once for itself."""
    s, clock = stack.settings, stack.deps.clock
    described = Described(stack.events)
    stack.put_raw(sk_at(T0_MS + 3 * DAY, "first"), {"x": "1"})
    run(stack, reader)  # arms through sync_rule: it knows what it applied
    assert described.calls == 0
    for i in range(5):
        stack.put_raw(sk_at(T0_MS + 4 * DAY + i, f"more{i}"), {"x": "1"})
        assert run(stack, reader) == {"batchItemFailures": []}
    assert described.calls == 0
    other = replace(stack.deps, rule_seen=RuleSeen())  # a second execution environment
    for i in range(3):
        stack.put_raw(sk_at(T0_MS + 5 * DAY + i, f"other{i}"), {"x": "1"})
        process_stream(reader.event(), other)
    assert described.calls == 1
    # a poll's re-arm bumps the version: each environment checks once again
    state = read_arm(stack.ddb, s, clock)
    compare_and_set(stack.ddb, s, clock, state.version, state.armed_ms)
    for deps in (stack.deps, stack.deps, other, other):
        stack.put_raw(sk_at(T0_MS + 6 * DAY + described.calls, f"again{described.calls}"), {"x": "1"})
        process_stream(reader.event(), deps)
    assert described.calls == 3
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(state.armed_ms)


BIG = "x" * 390_000  # near DynamoDB's 400 KB item limit: the rejection must still fit SQS
MALFORMED = [
    # (sk, payload attribute or None for missing, expected code, pk)
    ("1798761605#sec", {"M": {}}, "seconds_not_ms", None),
    ("2027-01-01T00:00:05.000Z#iso", {"M": {}}, "iso_string", None),
    ("2027-01-01 00:00:05#iso2", {"M": {}}, "iso_string", None),
    ("1798761605000", {"M": {}}, "missing_id", None),
    ("1798761605001#", {"M": {}}, "missing_id", None),
    ("1798761605002#a\x01b", {"M": {}}, "bad_id", None),
    ("1798761605003#a\u2028b", {"M": {}}, "bad_id", None),
    ("1798761605004#" + "i" * 600, {"M": {}}, "bad_id", None),
    ("7258118400000#y2200", {"M": {}}, "year_out_of_range", None),
    ("-001798761605#neg", {"M": {}}, "negative", None),
    ("1798761605005#nopayload", None, "missing_payload", None),
    ("1798761605006#str", {"S": "hello"}, "payload_not_map", None),
    ("1798761605007#list", {"L": [{"S": "a"}]}, "payload_not_map", None),
    ("1798761605008#num", {"N": "5"}, "payload_not_map", None),
    ("1798761605009#null", {"NULL": True}, "payload_not_map", None),
    ("1798761605010#set", {"SS": ["a", "b"]}, "payload_not_map", None),
    ("1798761605011#big", {"M": {"blob": {"S": BIG}}}, "oversize", None),
    ("1798761605012#wrongpk", {"M": {}}, "wrong_pk", "other"),
    ("17987616050130#fourteen", {"M": {}}, "malformed", None),
    ("179876160501#twelve", {"M": {}}, "malformed", None),
    ("abc#def", {"M": {}}, "malformed", None),
]


def put_item(stack, sk_value, payload, pk=None):
    item = {"pk": {"S": pk or stack.settings.partition_key_value}, "sk": {"S": sk_value}}
    if payload is not None:
        item["payload"] = payload
    stack.ddb.put_item(TableName=stack.settings.table_name, Item=item)


def test_catalogue_of_malformed_rows_rejected_and_valid_rows_of_the_batch_still_sent(stack, reader):
    assert len(MALFORMED) >= 15
    for sk_value, payload, _, pk in MALFORMED:
        put_item(stack, sk_value, payload, pk)
    # valid rows in the same batch: plain, binary set inside the payload, raw via client, far future
    put_item(stack, sk_at(T0_MS + 5000, "ok1"), {"M": {"n": {"N": "1.5"}}})
    put_item(stack, sk_at(T0_MS + 6000, "binset"), {"M": {"bin": {"BS": [b"\x00\x01", b"zz"]}}})
    client = PunctualClient(stack.settings.table_name, ddb=stack.ddb, clock=stack.deps.clock)
    via_client = client.schedule(T0_MS + 7000, {"k": [1, "two", None]}, id="client")
    put_item(stack, sk_at(T0_MS + 3 * DAY, "far"), {"M": {}})

    event = reader.event()
    assert len(event["Records"]) == len(MALFORMED) + 4
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}

    rejected = stack.bodies(stack.settings.rejected_queue_url)
    got = {r["sk"]: r for r in rejected}
    for sk_value, _, code, _ in MALFORMED:
        assert got[sk_value]["code"] == code, sk_value
        assert got[sk_value]["source"] == "editor" and got[sk_value]["reason"]
        assert got[sk_value]["item"]["sk"] == {"S": sk_value}
    assert len(rejected) == len(MALFORMED)
    assert "_truncated" in got["1798761605011#big"]["item"]
    # rejected rows are gone; valid ones remain (claimed or armed)
    left = {r["sk"]["S"] for r in stack.rows()}
    assert left == {sk_at(T0_MS + 5000, "ok1"), sk_at(T0_MS + 6000, "binset"), via_client.key, sk_at(T0_MS + 3 * DAY, "far")}
    sent = {b["sk"] for b in delay_bodies(stack, 10)}
    assert sent == {sk_at(T0_MS + 5000, "ok1"), sk_at(T0_MS + 6000, "binset"), via_client.key}
    # the editor's own writes (claims, deletes of rejected rows, meta) come back on the stream: all ignored
    follow = reader.event()
    names = {r["eventName"] for r in follow["Records"]}
    assert {"MODIFY", "REMOVE"} <= names
    assert process_stream(follow, stack.deps) == {"batchItemFailures": []}
    assert delay_bodies(stack, 10) == [] and stack.drain(stack.settings.rejected_queue_url) == []


def test_rejection_uses_the_row_as_it_is_now(stack, reader):
    put_item(stack, sk_at(T0_MS + 5000, "fixed"), {"S": "oops"})
    put_item(stack, sk_at(T0_MS + 5000, "fixed"), {"M": {"ok": {"BOOL": True}}})
    put_item(stack, sk_at(T0_MS + 5000, "gone"), {"S": "oops"})
    stack.ddb.delete_item(TableName=stack.settings.table_name,
                          Key={"pk": {"S": "scheduler"}, "sk": {"S": sk_at(T0_MS + 5000, "gone")}})
    assert run(stack, reader) == {"batchItemFailures": []}
    assert stack.drain(stack.settings.rejected_queue_url) == []
    assert [b["sk"] for b in delay_bodies(stack, 10)] == [sk_at(T0_MS + 5000, "fixed")]


def test_remove_and_meta_records_are_ignored(stack, reader):
    stack.put_raw(sk_at(T0_MS + DAY, "a"), {"x": "1"})
    run(stack, reader)
    stack.ddb.delete_item(TableName=stack.settings.table_name,
                          Key={"pk": {"S": "scheduler"}, "sk": {"S": sk_at(T0_MS + DAY, "a")}})
    event = reader.event()
    assert {r["eventName"] for r in event["Records"]} >= {"REMOVE"}
    assert any(r["dynamodb"]["Keys"]["pk"]["S"] == META_PK for r in event["Records"])
    before = read_arm(stack.ddb, stack.settings, stack.deps.clock)
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}
    assert read_arm(stack.ddb, stack.settings, stack.deps.clock) == before
    assert stack.drain(stack.settings.rejected_queue_url) == []


def test_garbage_records_do_not_block_the_batch(stack, reader):
    stack.put_raw(sk_at(T0_MS + 5000, "ok"), {"x": "1"})
    event = reader.event()
    event["Records"] = [{"eventName": "INSERT"}, "junk", *event["Records"]]
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}
    assert [b["sk"] for b in delay_bodies(stack, 10)] == [sk_at(T0_MS + 5000, "ok")]


# -- failures and crashes -------------------------------------------------------


def test_a_refused_send_costs_no_attempt_and_leaves_the_row_to_a_poll_next_minute(stack, reader):
    """SQS refusing the send (5xx through every retry) is not the record's fault: no batch item
    failure (no stream retry burning through a brownout), the claim released with its attempt
    taken back, and a poll armed for the next safe minute sends it (issue 28)."""
    s = stack.settings
    stack.put_raw(sk_at(T0_MS + 5000, "a"), {"x": "1"})
    event = reader.event()
    faults = Faults(stack.sqs).fail("SendMessageBatch", "InternalError", times=6)
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}
    faults.clear()
    row = stack.rows()[0]
    assert ATTR_ENQUEUED_MS not in row and row[ATTR_ATTEMPT] == {"N": "0"}  # released, no attempt used
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(minute_not_after(T0_MS, T0_MS + 10_000))
    release = reader.event()  # the release MODIFY is ignored: the arm above takes care of the row
    assert process_stream(release, stack.deps) == {"batchItemFailures": []}
    assert stack.drain(s.delay_queue_url) == []
    poll(stack.deps)  # the armed poll
    (body,) = delay_bodies(stack, 10)
    assert (body["sk"], body["attempt"]) == (sk_at(T0_MS + 5000, "a"), 1)


def test_arming_failure_asks_for_a_poll_through_the_delay_queue(stack, reader):
    """The rule refusing PutRule: the editor asks for the poll with a PollRequest message (the
    consumer arms it) instead of failing the records; only when SQS refuses that too do the
    records fail, and Lambda's retry arms."""
    stack.put_raw(sk_at(T0_MS + 3 * DAY, "a"), {"x": "1"})
    stack.put_raw(sk_at(T0_MS + 2 * DAY, "b"), {"x": "1"})
    event = reader.event()
    expected = minute_not_after(T0_MS + 2 * DAY - stack.settings.lead_ms, T0_MS)
    faults = Faults(stack.events).fail("PutRule", "AccessDeniedException")
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}
    (request,) = [json.loads(m["Body"]) for m in stack.drain(stack.settings.delay_queue_url)]
    assert (request["request"], request["poll_by_ms"]) == ("poll", expected)
    faults.clear()

    both = Faults(stack.events, stack.sqs).fail("PutRule", "AccessDeniedException").fail(
        "SendMessage", "InternalError", times=6)
    out = process_stream(event, stack.deps)
    assert {f["itemIdentifier"] for f in out["batchItemFailures"]} == {
        r["dynamodb"]["SequenceNumber"] for r in event["Records"]}
    both.clear()
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(expected)


def test_crash_after_claim_before_send_is_resent_by_the_batch_retry(stack, reader):
    s = stack.settings
    due = T0_MS + 5000
    stack.put_raw(sk_at(due, "a"), {"x": "1"})
    event = reader.event()
    faults = Faults(stack.ddb).crash_after("UpdateItem", 1)  # the claim
    with pytest.raises(InjectedCrash):
        process_stream(event, stack.deps)
    faults.clear()
    row = stack.rows()[0]
    assert ATTR_ENQUEUED_MS in row and row[ATTR_CLAIM]["S"].startswith("stream:")
    # Lambda retries the batch (the same records, so the same token): the retry claims the row
    # again and sends it at once, on time, instead of leaving it to the orphan check minutes later
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}
    (body,) = delay_bodies(stack, 10)
    assert body["sk"] == sk_at(due, "a")
    # the retry takes over the dead attempt's count: a crash after each claim uses no attempt
    assert stack.rows()[0][ATTR_ATTEMPT] == {"N": "1"} and body["attempt"] == 1
    armed = read_arm(stack.ddb, s, stack.deps.clock).armed_ms
    assert armed == minute_not_before(due + s.orphan_grace_ms, T0_MS)  # and a poll still follows


def test_crash_after_send_before_return_resends_the_same_row_once_more(stack, reader):
    """The retry cannot know the crashed attempt had sent: it sends again, taking over the attempt's
    count. Two pointers to one row, and only the retry's holds it (the row's mark is newer than the
    first's): the consumer delivers one event, the first pointer is dropped."""
    stack.put_raw(sk_at(T0_MS + 5000, "a"), {"x": "1"})
    event = reader.event()
    faults = Faults(stack.sqs).crash_after("SendMessageBatch", 1)
    with pytest.raises(InjectedCrash):
        process_stream(event, stack.deps)
    faults.clear()
    stack.deps.clock.frozen.tick(1)  # the stream's retry comes after the crash
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}
    bodies = delay_bodies(stack, 10)
    assert [b["sk"] for b in bodies] == [sk_at(T0_MS + 5000, "a")] * 2
    row = stack.rows()[0]
    assert row[ATTR_ATTEMPT] == {"N": "1"}
    held = [RowSend(b["pk"], b["sk"], b["attempt"], b["enqueued_ms"]).holds(send_mark(row)) for b in bodies]
    assert sorted(held) == [False, True] and max(bodies, key=lambda b: b["enqueued_ms"]) == bodies[held.index(True)]
    # a different batch (another record of another write) holds another token: no resend
    stack.put_raw(sk_at(T0_MS + 6000, "b"), {"x": "2"})
    assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}
    assert [b["sk"] for b in delay_bodies(stack, 10)] == [sk_at(T0_MS + 6000, "b")]


def test_crash_between_arm_and_rule_sync_converges_on_retry(stack, reader):
    due = T0_MS + 3 * DAY
    stack.put_raw(sk_at(due, "a"), {"x": "1"})
    event = reader.event()
    faults = Faults(stack.ddb).crash_after("UpdateItem", 1)  # arm_no_later_than wrote the meta row
    with pytest.raises(InjectedCrash):
        process_stream(event, stack.deps)
    faults.clear()
    minute = minute_not_after(due - stack.settings.lead_ms, T0_MS)
    assert read_arm(stack.ddb, stack.settings, stack.deps.clock).armed_ms == minute
    assert stack.rule()["State"] == "DISABLED"  # the rule was never told
    assert process_stream(event, stack.deps) == {"batchItemFailures": []}
    rule = stack.rule()
    assert rule["ScheduleExpression"] == one_shot_cron(minute) and rule["State"] == "ENABLED"


def json_time(ms: int) -> str:
    from punctual.core.clock import iso_ms

    return iso_ms(ms)


def test_stream_records_are_json_like_lambdas(stack, reader):
    put_item(stack, sk_at(T0_MS + 5000, "b"), {"M": {"bin": {"B": b"\x00"}}})
    (rec,) = reader.event()["Records"]
    json.dumps(rec)  # Lambda hands the function plain JSON
    assert rec["dynamodb"]["NewImage"]["payload"]["M"]["bin"] == {"B": "AA=="}


# -- races with a concurrent poll (invariant 6) ----------------------------------


def during_poll(stack, query_nth: int, action):
    """Run ``action`` once, right after the poller's ``query_nth``-th Query returns."""
    state = {"n": 0, "done": False}

    def hook(**_):
        state["n"] += 1
        if state["n"] == query_nth and not state["done"]:
            state["done"] = True
            action()

    stack.ddb.meta.events.register("after-call.dynamodb.Query", hook)
    return state


def test_editor_arming_during_a_poll_makes_the_poll_replan(stack, reader):
    """Poll read everything and is about to compare-and-set "disabled"; the editor arms a row
    due in 1 day in between: the poll's CAS fails, it re-plans and keeps the row armed."""
    due = T0_MS + DAY
    reader.skip()

    def editor_runs():
        stack.put_raw(sk_at(due, "late"), {"x": "1"})
        assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}

    state = during_poll(stack, 2, editor_runs)  # Query 1: window, Query 2: first unsent after it
    report = poll(stack.deps)
    assert state["done"]
    expected = minute_not_after(due - stack.settings.lead_ms, T0_MS)
    assert report.next_minute_ms == expected
    assert read_arm(stack.ddb, stack.settings, stack.deps.clock).armed_ms == expected
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(expected)
    assert stack.rule()["State"] == "ENABLED"


def test_editor_send_during_a_poll_keeps_its_orphan_check_armed(stack, reader):
    due = T0_MS + 5000
    reader.skip()

    def editor_runs():
        stack.put_raw(sk_at(due, "soon"), {"x": "1"})
        assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}

    during_poll(stack, 2, editor_runs)
    poll(stack.deps)
    armed = read_arm(stack.ddb, stack.settings, stack.deps.clock).armed_ms
    assert armed is not None and armed <= minute_not_before(due + stack.settings.orphan_grace_ms, T0_MS)


def test_every_horizon_in_one_batch(stack, reader):
    """Raw and client rows due 0.3 s, 5 s, 14 min (sent now, delays ceil to due - 1 s), 16 min, 3 days (armed)
    and 1 h in the past (sent now, no delay)."""
    sent = Sent(stack.sqs)
    client = PunctualClient(stack.settings.table_name, ddb=stack.ddb, clock=stack.deps.clock)
    offsets = {"p300ms": 300, "p5s": 5000, "p14m": 14 * 60_000, "p16m": 16 * 60_000, "p3d": 3 * DAY,
               "m1h": -3_600_000}
    for name, off in offsets.items():
        stack.put_raw(sk_at(T0_MS + off, "raw-" + name), {"n": name})
        client.schedule(T0_MS + off + 1, {"n": name}, id="cli-" + name)
    assert run(stack, reader) == {"batchItemFailures": []}
    delays = {p["sk"].split("#")[1]: e["DelaySeconds"] for e in sent.entries
              for p in pointers_of(json.loads(e["MessageBody"]))}
    # ceil towards due - wake_early_ms (1.2 s) - the group's extra wake (2 ms for two rows): the raw
    # and client rows of each horizon (1 ms apart) share one message, timed by its first row
    assert delays == {
        "raw-m1h": 0, "cli-m1h": 0, "raw-p300ms": 0, "cli-p300ms": 0, "raw-p5s": 4, "cli-p5s": 4,
        "raw-p14m": 839, "cli-p14m": 839,
    }
    assert len(sent.entries) == 4
    # the earliest need: the orphan check of the row sent for 1 h ago is due right away
    assert read_arm(stack.ddb, stack.settings, stack.deps.clock).armed_ms == minute_not_before(
        T0_MS + stack.settings.orphan_grace_ms, T0_MS)


def test_throttled_calls_are_retried_within_the_invocation(stack, reader):
    stack.put_raw(sk_at(T0_MS + 5000, "a"), {"x": "1"})
    Faults(stack.ddb, stack.sqs).throttle("UpdateItem", times=2).throttle("SendMessageBatch", times=2)
    assert run(stack, reader) == {"batchItemFailures": []}
    assert [b["sk"] for b in delay_bodies(stack, 10)] == [sk_at(T0_MS + 5000, "a")]


def test_lambda_entry_point_uses_the_environment(stack, reader, monkeypatch):
    from punctual.functions.editor.handler import handler

    from punctual.core.config import to_environment
    from punctual.core.runtime import reset_default_deps

    for name, value in to_environment(stack.settings).items():
        monkeypatch.setenv(name, value)
    reset_default_deps()
    try:
        stack.put_raw(sk_at(T0_MS + 5000, "a"), {"x": "1"})
        assert handler(reader.event(), None) == {"batchItemFailures": []}
    finally:
        reset_default_deps()
    assert [b["sk"] for b in delay_bodies(stack, 10)] == [sk_at(T0_MS + 5000, "a")]


def test_editor_never_postpones_an_armed_minute_whose_fire_is_pending(stack, reader):
    """The armed minute has begun and EventBridge has not fired yet (it fires anywhere in the
    minute): an editor batch must leave the rule alone. Moving it to the next minute cancelled
    the pending fire, and a steady trickle of inserts postponed the poll for hours (benchmark)."""
    s = stack.settings
    stack.put_raw(sk_at(T0_MS + 3 * DAY, "a"), {"x": "1"})
    run(stack, reader)
    armed = read_arm(stack.ddb, s, stack.deps.clock).armed_ms
    stack.deps.clock.frozen.move_to(datetime.fromtimestamp((armed + 10_000) / 1000, tz=UTC))
    for n in range(3):  # one insert a minute into the pending minute: never postponed
        stack.put_raw(sk_at(T0_MS + 4 * DAY + n, f"b{n}"), {"x": "1"})
        assert run(stack, reader) == {"batchItemFailures": []}
        assert stack.rule()["ScheduleExpression"] == one_shot_cron(armed)
        assert stack.rule()["State"] == "ENABLED"


def test_without_a_fast_path_rows_a_poll_can_reach_wait_for_it_and_share_its_messages(stack, reader):
    """fast_path_seconds=0: the editor sends only what no poll could still be armed for; a row due
    in 10 min is left to the poll it arms, which sends it together with every row due at that ms."""
    import dataclasses

    stack.settings = stack.deps.settings = dataclasses.replace(stack.settings, fast_path_seconds=0)
    s = stack.settings
    soon, later = T0_MS + 60_000, T0_MS + 10 * 60_000
    stack.put_raw(sk_at(soon, "soon"), {"n": 1})
    for i in range(3):
        stack.put_raw(sk_at(later, f"later-{i}"), {"n": i})
    assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}
    sent = Sent(stack.sqs)
    # the row due in 60 s was sent (no poll can start by then); the others armed a poll in time
    assert [p["sk"] for p in delay_bodies(stack, 61)] == [sk_at(soon, "soon")]
    armed = read_arm(stack.ddb, s, stack.deps.clock).armed_ms
    assert armed <= minute_not_after(later - s.lead_ms, T0_MS)
    stack.deps.clock.frozen.move_to(json_time(armed + 30_000))
    assert poll(stack.deps).sent == 3
    assert len(sent.entries) == 1  # the three rows due at the same ms: one group message
    assert sorted(p["sk"] for p in pointers_of(json.loads(sent.entries[0]["MessageBody"]))) == [
        sk_at(later, f"later-{i}") for i in range(3)]
