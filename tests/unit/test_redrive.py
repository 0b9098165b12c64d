"""Redrive's pure part (punctual/core/redrive.py) and the rejected-rows message it reads (issue 28)."""

from __future__ import annotations

import json

import pytest

from punctual.core.models import MAX_REJECTION_BYTES, Rejection, RowRejected
from punctual.core.redrive import (
    INVALID,
    OTHER_TABLE,
    SKIPPED,
    TRUNCATED,
    UNREADABLE,
    NotRedrivable,
    fresh_row,
    parse_rejection,
    restore_binary,
)

SK = "1798761605000#order-42"
ROW = {"pk": {"S": "scheduler"}, "sk": {"S": SK},
       "payload": {"M": {"b": {"B": b"\x00\xff"}, "bs": {"BS": [b"\x01", b"\x02"]},
                         "l": {"L": [{"M": {"deep": {"B": b"\x03"}}}, {"N": "1.50"}]}, "s": {"SS": ["x"]}}},
       "owner": {"S": "billing"}}
BOOKKEEPING = {"punctual_enqueued_ms": {"N": "1798761000000"}, "punctual_attempt": {"N": "5"},
               "punctual_claim": {"S": "poll-1"}, "punctual_future": {"S": "x"}}


def queued(item, code="undeliverable", table="punctual") -> Rejection:
    """The rejection as the redrive reads it back from the queue."""
    return parse_rejection(Rejection.of(item, RowRejected(code, "why"), "poller", 0, table=table).body())


def test_the_message_carries_the_table_and_the_whole_row_and_redrive_rebuilds_it():
    rejection = queued({**ROW, **BOOKKEEPING})
    assert rejection.table == "punctual" and rejection.item_complete
    assert rejection.item["payload"]["M"]["b"] == {"B": "AP8="}  # binary as base64 text in the message
    assert fresh_row(rejection, "scheduler", "punctual") == ROW  # bookkeeping gone, binary as bytes


def test_binary_is_restored_at_any_depth():
    assert restore_binary({"M": {"a": {"L": [{"BS": ["AQ=="]}, {"B": "Ag=="}]}}}) == {
        "M": {"a": {"L": [{"BS": [b"\x01"]}, {"B": b"\x02"}]}}}
    assert restore_binary({"S": "AQ=="}) == {"S": "AQ=="}  # a string that looks like base64 stays text
    with pytest.raises(NotRedrivable) as info:
        restore_binary({"B": "not base64!"})
    assert info.value.why == INVALID


@pytest.mark.parametrize("body", ["hello", "[]", '{"code": "x"}', ""])
def test_a_body_that_is_not_a_rejection_is_unreadable(body):
    with pytest.raises(NotRedrivable) as info:
        parse_rejection(body)
    assert info.value.why == UNREADABLE


def test_a_truncated_rejection_is_not_redriven():
    big = {**ROW, "payload": {"M": {"blob": {"S": "x" * 390_000}}}}
    rejection = queued(big, "oversize")
    assert not rejection.item_complete and "payload" not in rejection.item
    with pytest.raises(NotRedrivable) as info:
        fresh_row(rejection, "scheduler", "punctual")
    assert info.value.why == TRUNCATED
    # a message from before item_complete existed says so by its markers only
    old = json.loads(Rejection.of(big, RowRejected("oversize", "why"), "editor", 0).body())
    del old["item_complete"], old["table"]
    assert "_truncated" in old["item"]
    with pytest.raises(NotRedrivable) as info:
        fresh_row(parse_rejection(json.dumps(old)), "scheduler", "punctual")
    assert info.value.why == TRUNCATED


def test_a_rejection_flagged_incomplete_is_truncated_whatever_its_item_holds():
    """Rejection._fit's last resort keeps only pk and sk, with no marker: the flag says it."""
    rejection = queued(ROW).model_copy(update={"item_complete": False})
    with pytest.raises(NotRedrivable) as info:
        fresh_row(rejection, "scheduler", "punctual")
    assert info.value.why == TRUNCATED


def test_body_cut_to_the_key_says_the_row_is_incomplete():
    rejection = Rejection.of(ROW, RowRejected("oversize", "why"), "editor", 0)
    huge = rejection.model_copy(update={"item": {**rejection.item, "x": {"S": "y" * MAX_REJECTION_BYTES}}})
    assert json.loads(huge.body())["item_complete"] is False


def test_codes_table_and_validity():
    rejection = queued(ROW, "undeliverable")
    with pytest.raises(NotRedrivable) as info:
        fresh_row(rejection, "scheduler", "punctual", codes=["oversize"])
    assert info.value.why == SKIPPED
    with pytest.raises(NotRedrivable) as info:
        fresh_row(rejection, "scheduler", "another-table")
    assert info.value.why == OTHER_TABLE
    with pytest.raises(NotRedrivable) as info:
        fresh_row(rejection, "other-partition", "punctual")
    assert (info.value.why, info.value.detail.split(":")[0]) == (INVALID, "wrong_pk")
    assert fresh_row(queued(ROW, table=None), "scheduler", "any")  # an old message names no table
