"""Rows -> tasks: every rejection carries a code; bookkeeping attributes are read back."""

from __future__ import annotations

import json

import pytest

from punctual.core.models import (
    ATTR_ATTEMPT,
    ATTR_ENQUEUED_MS,
    MAX_PAYLOAD_BYTES,
    DelayMessage,
    DeliveredEvent,
    Rejection,
    RowRejected,
    event_id,
    task_from_item,
)

P = "scheduler"
SK = "1798761600000#order-1"


def row(**over):
    item = {"pk": {"S": P}, "sk": {"S": SK}, "payload": {"M": {"n": {"N": "1.5"}, "s": {"SS": ["b", "a"]}}}}
    item.update(over)
    return {k: v for k, v in item.items() if v is not None}


def test_valid_row():
    t = task_from_item(row(), P)
    assert (t.pk, t.sk, t.id, t.due_ms) == (P, SK, "order-1", 1798761600000)
    assert t.payload == {"n": 1.5, "s": ["a", "b"]}
    assert (t.enqueued_ms, t.attempt) == (None, 0)


def test_bookkeeping_read_back():
    t = task_from_item(row(**{ATTR_ENQUEUED_MS: {"N": "1798761500000"}, ATTR_ATTEMPT: {"N": "2"}}), P)
    assert (t.enqueued_ms, t.attempt) == (1798761500000, 2)


@pytest.mark.parametrize(
    "over, code",
    [
        ({"pk": {"S": "other"}}, "wrong_pk"),
        ({"pk": None}, "wrong_pk"),
        ({"pk": {"N": "1"}}, "wrong_pk"),
        ({"sk": None}, "malformed"),
        ({"sk": {"N": "1798761600000"}}, "not_a_string"),
        ({"sk": {"S": "1798761600#x"}}, "seconds_not_ms"),
        ({"sk": {"S": "2027-01-01T00:00:00Z#x"}}, "iso_string"),
        ({"sk": {"S": "7258118400000#x"}}, "year_out_of_range"),
        ({"payload": None}, "missing_payload"),
        ({"payload": {"S": "{}"}}, "payload_not_map"),
        ({"payload": {"L": []}}, "payload_not_map"),
        ({"payload": {"NULL": True}}, "payload_not_map"),
        ({"payload": {"M": {"x": {"N": "NaN"}}}}, "payload_unsupported"),
        ({"payload": {"M": {"big": {"S": "x" * (MAX_PAYLOAD_BYTES + 1)}}}}, "oversize"),
    ],
)
def test_rejections(over, code):
    with pytest.raises(RowRejected) as info:
        task_from_item(row(**over), P)
    assert info.value.code == code
    assert info.value.reason


def test_payload_at_the_limit_is_accepted():
    # {"big":"..."} is 10 bytes of JSON around the string
    t = task_from_item(row(payload={"M": {"big": {"S": "x" * (MAX_PAYLOAD_BYTES - 10)}}}), P)
    assert len(t.payload["big"]) == MAX_PAYLOAD_BYTES - 10


def test_not_a_map():
    with pytest.raises(RowRejected) as info:
        task_from_item(["x"], P)  # type: ignore[arg-type]
    assert info.value.code == "malformed"


def test_event_id_is_stable_and_distinct():
    assert event_id(P, SK) == event_id(P, SK) == task_from_item(row(), P).event_id
    assert event_id(P, SK) != event_id(P, SK + "x")


def test_messages_are_compact_json():
    t = task_from_item(row(), P)
    msg = json.loads(DelayMessage(pk=P, sk=SK, due_ms=t.due_ms, attempt=2, enqueued_ms=5).body())
    assert msg == {"pk": P, "sk": SK, "due_ms": t.due_ms, "attempt": 2, "enqueued_ms": 5}
    ev = json.loads(DeliveredEvent.for_task(t, t.due_ms + 42, 1).body())
    assert ev["due"] == "2027-01-01T00:00:00.000Z" and ev["lateness_ms"] == 42
    assert ev["publicationTimestamp"] == t.due_ms and ev["key"] == SK and ev["payload"] == t.payload


def test_rejection_keeps_the_row_with_binary_as_base64():
    item = row(payload={"B": b"\x00\x01"})
    with pytest.raises(RowRejected) as info:
        task_from_item(item, P)
    rej = json.loads(Rejection.of(item, info.value, "poller", 1798761600000).body())
    assert rej["code"] == "payload_not_map" and rej["sk"] == SK
    assert rej["item"]["payload"] == {"B": "AAE="}
