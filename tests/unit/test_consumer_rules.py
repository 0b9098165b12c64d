"""Pure consumer decisions: record parsing, wait / put back / deliver, grouping."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual.core.consumer_rules import (
    MAX_VISIBILITY_SECONDS,
    MessageAction,
    Pending,
    PoisonMessage,
    classify,
    hand_off,
    message_id_of,
    next_group,
    not_yet_due,
    parse_record,
    plan_consume,
    visibility_seconds,
)
from punctual.core.models import DelayMessage

DUE = 1_798_761_600_500
SK = f"{DUE}#task-1"


def record(body, mid="m1", count="1", handle="rh"):
    rec = {"messageId": mid, "receiptHandle": handle, "body": body,
           "attributes": {"ApproximateReceiveCount": count}}
    return rec


def good_body(**over):
    data = {"pk": "scheduler", "sk": SK, "due_ms": DUE, "attempt": 1, "enqueued_ms": DUE - 5000}
    data.update(over)
    return json.dumps(data)


def pending(due, pos=0, sk=None):
    sk = sk or f"{due}#p{pos}"
    return Pending(f"m{pos}", f"h{pos}", DelayMessage(pk="scheduler", sk=sk, due_ms=due, enqueued_ms=0), 1, pos)


# -- parse_record -------------------------------------------------------------------


def test_parse_valid_record():
    (p,) = parse_record(record(good_body(), count="3"), 4, "scheduler").pointers
    assert p.message_id == "m1" and p.receipt_handle == "rh" and p.position == 4
    assert p.receive_count == 3 and p.due_ms == DUE and p.key == ("scheduler", SK)
    assert p.message.attempt == 1


def test_parse_ignores_unknown_fields_and_defaults_attempt():
    data = json.loads(good_body())
    del data["attempt"]
    data["future_field"] = "x"
    assert parse_record(record(json.dumps(data)), 0, "scheduler").pointers[0].message.attempt == 1


@pytest.mark.parametrize("count,expected", [("1", 1), ("7", 7), (None, 1), ("x", 1), ("0", 1)])
def test_receive_count(count, expected):
    rec = record(good_body(), count=count)
    assert parse_record(rec, 0, "scheduler").pointers[0].receive_count == expected


def test_missing_attributes_means_first_receive():
    rec = {"messageId": "m", "receiptHandle": "h", "body": good_body()}
    assert parse_record(rec, 0, "scheduler").pointers[0].receive_count == 1


@pytest.mark.parametrize(
    "body,why",
    [
        ("not json", "not JSON"),
        ("[]", "not a JSON object"),
        ("null", "not a JSON object"),
        (good_body(due_ms=str(DUE)), "not a DelayMessage"),  # strict: no string->int coercion
        (good_body(due_ms=float(DUE)), "not a DelayMessage"),
        (good_body(enqueued_ms=None), "not a DelayMessage"),
        (json.dumps({"pk": "scheduler", "sk": SK}), "not a DelayMessage"),
        (good_body(pk="other"), "partition"),
        (good_body(pk="__punctual__"), "partition"),
        (good_body(sk="17987616#x", due_ms=17987616), "sk is invalid"),
        (good_body(sk="abc"), "sk is invalid"),
        (good_body(due_ms=DUE + 1), "does not match"),
    ],
)
def test_poison_bodies(body, why):
    with pytest.raises(PoisonMessage, match=why):
        parse_record(record(body), 0, "scheduler")


@pytest.mark.parametrize(
    "rec",
    [
        "not a map",
        {"receiptHandle": "h", "body": "{}"},
        {"messageId": "m", "body": "{}"},
        {"messageId": "m", "receiptHandle": "h"},
        {"messageId": "m", "receiptHandle": "h", "body": 3},
    ],
)
def test_poison_records(rec):
    with pytest.raises(PoisonMessage):
        parse_record(rec, 0, "scheduler")


def test_message_id_of_falls_back_to_position():
    assert message_id_of({"messageId": "abc"}, 3) == "abc"
    assert message_id_of({}, 3) == "#3"
    assert message_id_of("x", 2) == "#2"  # type: ignore[arg-type]


@given(st.text(max_size=200))
def test_parse_never_raises_anything_but_poison(body):
    try:
        parse_record(record(body), 0, "scheduler")
    except PoisonMessage:
        pass


# -- classify / visibility --------------------------------------------------------------------


@pytest.mark.parametrize(
    "remaining,action,wait",
    [(-5000, MessageAction.DELIVER, 0), (0, MessageAction.DELIVER, 0), (1, MessageAction.WAIT, 1), (2000, MessageAction.WAIT, 2000),
     (2001, MessageAction.PUT_BACK, 0)],
)
def test_classify(remaining, action, wait):
    d = classify(DUE, DUE - remaining, 2000)
    assert d.action is action and d.wait_ms == wait


def test_put_back_returns_inside_the_wait_band():
    d = classify(DUE, DUE - 10_400, 2000)
    assert d.action is MessageAction.PUT_BACK and d.visibility_seconds == 10  # back 400 ms early, then waits


@pytest.mark.parametrize(
    "remaining,max_wait,expected",
    [(2001, 2000, 2), (2999, 2000, 2), (3000, 2000, 3), (10_400, 1000, 10),
     (1, 0, 1), (1000, 0, 1), (1001, 0, 2), (1001, 500, 2), (10_400, 999, 11),
     (10**12, 2000, MAX_VISIBILITY_SECONDS), (10**12, 0, MAX_VISIBILITY_SECONDS)],
)
def test_visibility_seconds(remaining, max_wait, expected):
    assert visibility_seconds(remaining, max_wait) == expected


@given(remaining=st.integers(1, 50_000_000), max_wait=st.integers(0, 5000))
def test_put_back_comes_back_before_a_second_late_and_within_the_wait_band(remaining, max_wait):
    if remaining <= max_wait:
        return
    v = visibility_seconds(remaining, max_wait) * 1000
    back_early_by = remaining - v  # >= 0: back early (the consumer then waits), < 0: back late
    assert v >= 1000
    if remaining > MAX_VISIBILITY_SECONDS * 1000:
        assert v == MAX_VISIBILITY_SECONDS * 1000
    elif max_wait >= 1000:
        assert 0 <= back_early_by < 1000 and back_early_by <= max_wait  # then waited in-process
    else:
        assert -1000 < back_early_by <= 0  # never back early, less than a second late


# -- batch planning --------------------------------------------------------------------------


def test_plan_consume_splits_and_sorts_stably():
    now = DUE
    recs = [pending(now + 1500, 0), pending(now + 5000, 1), pending(now - 10, 2), pending(now + 1500, 3),
            pending(now + 2000, 4), pending(now + 3000, 5)]
    plan = plan_consume(recs, now, 2000)
    assert [r.position for r in plan.keep] == [2, 0, 3, 4]
    assert [(r.position, v) for r, v in plan.put_back] == [(5, 3), (1, 5)]


def test_next_group():
    assert next_group([], 0) == (0, 0)
    assert next_group([100, 105, 111, 500], 0, coalesce_ms=10) == (2, 105)
    assert next_group([100, 105, 111, 500], 0, coalesce_ms=0) == (1, 100)
    # already due: everything due by now + coalesce goes, waiting only for the last
    assert next_group([-50, 0, 5, 30], 0, coalesce_ms=10) == (3, 5)
    assert next_group([-50, -40], 0) == (2, 0)


@given(st.lists(st.integers(-5000, 5000), min_size=1, max_size=12), st.integers(-1000, 1000),
       st.integers(0, 50))
def test_groups_cover_the_batch_in_order_and_never_wait_past_a_member(dues, now, coalesce):
    dues = sorted(dues)
    rest, seen = list(dues), []
    while rest:
        n, wait = next_group(rest, now, coalesce)
        assert n >= 1
        group, rest = rest[:n], rest[n:]
        assert now + wait == max(now, group[-1])  # wait exactly until the last member is due
        assert group[-1] - max(now, group[0]) <= coalesce  # the earliest is at most `coalesce` late
        seen += group
        now += wait
    assert seen == dues


def test_not_yet_due():
    assert not_yet_due([], 10) == 0
    assert not_yet_due([5, 10], 10) == 0
    assert not_yet_due([5, 12, 11], 10) == 2


# -- group messages (many row pointers in one record) ----------------------------------

def group_body(sks, **over):
    data = {"pk": "scheduler", "due_ms": DUE, "enqueued_ms": DUE - 5000, "rows": [[sk, 1] for sk in sks]}
    data.update(over)
    return json.dumps(data)


def test_a_group_record_gives_one_pointer_per_row_sharing_the_record():
    sks = [f"{DUE}#a", f"{DUE + 3}#b", f"{DUE + 900}#c"]
    parsed = parse_record(record(group_body(sks), mid="g1", count="2"), 3, "scheduler")
    assert parsed.poison is None
    # a body without extra_wake_ms (as before it existed): the group's own extra wake, 2 ms a row beyond the first
    assert [(p.message.sk, p.due_ms, p.message_id, p.receive_count, p.extra_wake_ms) for p in parsed.pointers] == [
        (sks[0], DUE, "g1", 2, 4), (sks[1], DUE + 3, "g1", 2, 4), (sks[2], DUE + 900, "g1", 2, 4)]


def test_a_message_carries_its_extra_wake_and_the_consumer_holds_it_that_much_longer():
    from punctual.core.models import DelayGroup

    rows = [(f"{DUE}#a", DUE, 1), (f"{DUE + 5}#b", DUE + 5, 1)]
    for body in (DelayGroup.body_of("scheduler", rows, DUE - 10, extra_wake_ms=9_400),
                 DelayGroup.body_of("scheduler", rows[:1], DUE - 10, extra_wake_ms=9_400)):
        assert json.loads(body)["extra_wake_ms"] == 9_400
        parsed = parse_record(record(body, mid="c"), 0, "scheduler")
        assert {p.extra_wake_ms for p in parsed.pointers} == {9_400}
        # held from due - max_wait - 9.4 s on; a ms earlier, put back (to its band)
        assert [p.message_id for p in plan_consume(parsed.pointers, DUE - 2000 - 9_400, 2000).keep][:1] == ["c"]
        assert plan_consume(parsed.pointers, DUE - 2001 - 9_400, 2000).keep == []
    # never held longer than MAX_EXTRA_WAKE_MS whatever a body says; a negative one is poison
    from punctual.core.planning import MAX_EXTRA_WAKE_MS
    huge = parse_record(record(DelayGroup.body_of("scheduler", rows, DUE - 10, extra_wake_ms=10**9)), 0, "scheduler")
    assert {p.extra_wake_ms for p in huge.pointers} == {MAX_EXTRA_WAKE_MS}
    with pytest.raises(PoisonMessage, match="DelayMessage"):
        parse_record(record(json.dumps({"pk": "scheduler", "sk": rows[0][0], "due_ms": DUE, "enqueued_ms": 0,
                                        "extra_wake_ms": -1})), 0, "scheduler")


def test_the_group_body_round_trips_and_one_row_is_sent_as_a_plain_pointer():
    from punctual.core.models import DelayGroup

    rows = [(f"{DUE}#a", DUE, 1), (f"{DUE + 5}#b", DUE + 5, 2)]
    parsed = parse_record(record(DelayGroup.body_of("scheduler", rows, DUE - 10)), 0, "scheduler")
    assert [(p.message.sk, p.due_ms, p.message.attempt) for p in parsed.pointers] == rows
    single = json.loads(DelayGroup.body_of("scheduler", rows[:1], DUE - 10))
    assert single == {"pk": "scheduler", "sk": rows[0][0], "due_ms": DUE, "attempt": 1, "enqueued_ms": DUE - 10}


def test_a_poison_pointer_inside_a_group_leaves_the_others_usable():
    parsed = parse_record(record(group_body([f"{DUE}#a", "not-a-key", f"{DUE + 1}#b"])), 0, "scheduler")
    assert [p.message.sk for p in parsed.pointers] == [f"{DUE}#a", f"{DUE + 1}#b"]
    assert parsed.poison and "1 of 3" in parsed.poison


@pytest.mark.parametrize("body,why", [
    (group_body(["bad", "worse"]), "invalid"),
    (group_body([]), "no rows"),
    (group_body([f"{DUE}#a"], pk="other"), "partition"),
    (group_body([f"{DUE}#a"], pk="__punctual__"), "partition"),
    (json.dumps({"pk": "scheduler", "due_ms": DUE, "enqueued_ms": 0, "rows": [[f"{DUE}#a", "1"]]}), "DelayGroup"),
    (json.dumps({"pk": "scheduler", "due_ms": DUE, "enqueued_ms": 0, "rows": "x"}), "DelayGroup"),
])
def test_poison_groups(body, why):
    with pytest.raises(PoisonMessage, match=why):
        parse_record(record(body), 0, "scheduler")


def test_plan_consume_decides_a_group_by_its_earliest_row_with_its_extra_wake():
    from punctual.core.planning import group_extra_wake_ms

    now = DUE - 2000 - group_extra_wake_ms(500)  # the 500-row group is just inside its wait band
    big = [Pending("big", "h", DelayMessage(pk="scheduler", sk=f"{DUE + i}#x{i}", due_ms=DUE + i, enqueued_ms=0),
                   1, 0, extra_wake_ms=group_extra_wake_ms(500)) for i in range(500)]
    lone = pending(DUE, pos=1)  # due as soon as the group's first row, but a single row: put back
    plan = plan_consume([*big, lone], now, max_wait_ms=2000)
    assert [p.message_id for p in plan.keep] == ["big"] * 500
    assert [(rec.message_id, s) for rec, s in plan.put_back] == [("m1", 2)]
    later = plan_consume(big, now - 1000, max_wait_ms=2000)  # a second earlier: the whole group goes back, once
    assert later.keep == [] and [(rec.message.sk, s) for rec, s in later.put_back] == [(big[0].message.sk, 3)]


# -- hand_off ------------------------------------------------------------------------


def group(mid: str, due: int, rows: int, position: int, receives: int = 1) -> list[Pending]:
    """The pointers of one group message of ``rows`` rows due from ``due`` on, one per ms."""
    return [Pending(mid, f"h-{mid}", DelayMessage(pk="scheduler", sk=f"{due + i}#{mid}-{i}", due_ms=due + i,
                                                  enqueued_ms=0), receives, position)
            for i in range(rows)]


def test_hand_off_keeps_whole_messages_in_due_order_up_to_the_row_budget():
    a, b, c, d = group("a", DUE, 400, 0), group("b", DUE + 1, 400, 1), group("c", DUE + 2, 300, 2), group("d", DUE + 3, 200, 3)
    keep = sorted([*d, *c, *b, *a], key=lambda r: (r.due_ms, r.position))
    kept, handed = hand_off(keep, max_rows=1000)
    # a (400) + b (400) = 800; c (300) would make 1,100: handed; d (200) still fits: 1,000
    assert sorted({r.message_id for r in kept}) == ["a", "b", "d"]
    assert len(kept) == 1000 and [r.message_id for r in handed] == ["c"]
    assert handed[0] is c[0]  # the message's earliest pointer (its receipt handle is the message's)
    assert kept == sorted(kept, key=lambda r: (r.due_ms, r.position))


def test_hand_off_keeps_no_more_rows_than_a_message_of_a_cluster_asks():
    a, b, c = group("a", DUE, 250, 0), group("b", DUE + 1, 250, 1), group("c", DUE + 2, 250, 2)
    b = [dataclasses.replace(p, consumer_rows=250) for p in b]
    keep = sorted([*a, *b, *c], key=lambda r: (r.due_ms, r.position))
    kept, handed = hand_off(keep, max_rows=1000)
    assert {r.message_id for r in kept} == {"a"} and [r.message_id for r in handed] == ["b", "c"]
    assert {r.message_id for r in hand_off([*a, *c], max_rows=1000)[0]} == {"a", "c"}  # none asks: 1,000


def test_hand_off_always_keeps_the_first_message_and_one_received_too_often():
    huge, tired, fresh = group("huge", DUE, 1500, 0), group("tired", DUE + 1, 10, 1, receives=3), group("fresh", DUE + 2, 10, 2, receives=2)
    keep = sorted([*huge, *tired, *fresh], key=lambda r: (r.due_ms, r.position))
    kept, handed = hand_off(keep, max_rows=1000)
    assert {r.message_id for r in kept} == {"huge", "tired"}  # over budget alone; received 3 times
    assert [r.message_id for r in handed] == ["fresh"]
    assert hand_off([], max_rows=1000) == ([], [])
    assert hand_off(fresh, max_rows=1) == (fresh, [])


def test_a_stream_failure_notice_names_the_batch_given_up_on_for_the_poll_to_take_over():
    """Lambda's OnFailure record of a stream batch (lambda_events.stream_failure_record): the
    control carries the batch's sequence numbers (planning.given_up_batch); a poller's notice none."""
    from punctual.lambda_events import async_failure_record, stream_failure_record

    records = [{"dynamodb": {"SequenceNumber": "4200"}}, {"dynamodb": {"SequenceNumber": "4207"}}]
    notice = stream_failure_record(records, "arn:stream", "arn:fn", 3, 1_000)
    control = parse_record(record(json.dumps(notice), mid="n1"), 0, "scheduler").control
    assert control is not None and control.notice and control.given_up == "4200-4207"
    failed_poll = async_failure_record({"id": "e"}, "arn:fn", 3, 1_000, "boom")
    control = parse_record(record(json.dumps(failed_poll), mid="n2"), 0, "scheduler").control
    assert control is not None and control.notice and control.given_up is None
