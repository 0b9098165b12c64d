"""The delivered-event formats: Punctual's DeliveredEvent and cdk-scheduler's body
(docs/migrating.md, "The delivered event"), and the size limit in each."""

from __future__ import annotations

import json

import pytest

from punctual.core.config import ENV, Settings, load_settings, to_environment
from punctual.core.ddbjson import to_plain
from punctual.core.keys import MAX_ID_BYTES, encode_sk
from punctual.core.models import (
    MAX_EVENT_BYTES,
    MAX_PAYLOAD_BYTES,
    DeliveredEvent,
    RowRejected,
    Task,
    cdk_scheduler_body,
    delivery_body,
    dumps,
    task_from_item,
)

P = "scheduler"
DUE = 1_798_135_200_000
SK = encode_sk(DUE, "order-42")

RICH = {"M": {
    "order": {"N": "42"},
    "price": {"N": "1.50"},
    "big": {"N": "1E+3"},
    "ok": {"BOOL": True},
    "none": {"NULL": True},
    "name": {"S": "café \"x\""},
    "nested": {"M": {"list": {"L": [{"N": "-7"}, {"S": "a"}, {"M": {}}, {"L": []}, {"BOOL": False}]}}},
    "tags": {"SS": ["b", "a"]},
    "blob": {"B": b"\x00\xff"},
}}


def row(payload=None):
    return {"pk": {"S": P}, "sk": {"S": SK}, "payload": payload if payload is not None else RICH}


def event_of(task: Task) -> DeliveredEvent:
    return DeliveredEvent.for_task(task, delivered_at_ms=DUE + 12, attempt=1)


def test_cdk_scheduler_body_is_due_ms_then_the_payload_attribute_as_read():
    # GIVEN a row with every attribute type, numbers written as "1.50" and "1E+3"
    task = task_from_item(row(), P, "cdk-scheduler")
    # WHEN it is rendered in cdk-scheduler's format
    body = delivery_body(event_of(task), task, "cdk-scheduler")
    # THEN the body is exactly cdk-scheduler's: publicationTimestamp (the sk's digits, a string, as its published build sends it) first, then the
    # payload attribute unchanged ({"M": ...}, numbers as their text, binary as base64)
    assert body == (
        '{"publicationTimestamp":"1798135200000","payload":{"M":{'
        '"big":{"N":"1E+3"},"blob":{"B":"AP8="},"name":{"S":"café \\"x\\""},"nested":{"M":{"list":{"L":['
        '{"N":"-7"},{"S":"a"},{"M":{}},{"L":[]},{"BOOL":false}]}}},"none":{"NULL":true},'
        '"ok":{"BOOL":true},"order":{"N":"42"},"price":{"N":"1.50"},"tags":{"SS":["b","a"]}}}}'
    )
    assert list(json.loads(body)) == ["publicationTimestamp", "payload"]


def test_cdk_scheduler_body_of_a_task_built_without_a_row_uses_the_plain_payload():
    # GIVEN a Task made in code (no row read), with a plain payload
    task = Task(pk=P, sk=SK, id="order-42", due_ms=DUE, payload={"order": 42, "x": [1.5, None, "s", True]})
    # THEN its payload is written as DynamoDB JSON
    assert cdk_scheduler_body(task) == (
        '{"publicationTimestamp":"1798135200000","payload":{"M":{"order":{"N":"42"},'
        '"x":{"L":[{"N":"1.5"},{"NULL":true},{"S":"s"},{"BOOL":true}]}}}}'
    )


def test_punctual_body_is_the_delivered_event_with_a_plain_payload():
    task = task_from_item(row({"M": {"order": {"N": "42"}, "ok": {"BOOL": True}}}), P)
    body = delivery_body(event_of(task), task, "punctual")
    assert body == event_of(task).body()
    got = json.loads(body)
    assert got["payload"] == {"order": 42, "ok": True} and got["publicationTimestamp"] == DUE
    assert got["event_id"] == task.event_id and "payload_av" not in got


def test_unknown_format_is_refused():
    task = task_from_item(row(), P)
    with pytest.raises(ValueError, match="cdk-scheduler"):
        delivery_body(event_of(task), task, "cdk")
    with pytest.raises(ValueError, match="cdk-scheduler"):
        task_from_item(row(), P, "cdk")


# -- size: a row validation accepts always fits one SQS message in the chosen format -------


def strings(n: int, value: str = "x") -> dict:
    """A payload of ``n`` one-char strings: ~8 bytes each as JSON, ~16 as DynamoDB JSON."""
    return {"M": {f"{i:06x}": {"S": value} for i in range(n)}}


def plain_size(av):
    return len(dumps(to_plain(av)).encode())


def ddb_size(av):
    return len(dumps(av).encode())


def largest(limit_of, fmt) -> tuple[dict, dict]:
    """The largest payload of this shape that ``fmt`` accepts, and the next one (refused)."""
    n = 1
    while limit_of(strings(n * 2)) <= MAX_PAYLOAD_BYTES:
        n *= 2
    lo, hi = n, n * 2  # accepted, refused
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if limit_of(strings(mid)) <= MAX_PAYLOAD_BYTES else (lo, mid)
    return strings(lo), strings(hi)


@pytest.mark.parametrize("fmt, measure", [("punctual", plain_size), ("cdk-scheduler", ddb_size)])
def test_the_largest_accepted_payload_fits_one_sqs_message(fmt, measure):
    # GIVEN the largest payload the validation accepts in this format (and one entry more)
    ok, over = largest(measure, fmt)
    assert measure(ok) > MAX_PAYLOAD_BYTES - 32
    # THEN the accepted one renders to a body within SQS's 256 KiB (the longest key included)
    long_sk = encode_sk(DUE, "\u00e9" * (MAX_ID_BYTES // 2))  # the longest id in bytes
    task = task_from_item({**row(ok), "sk": {"S": long_sk}}, P, fmt)
    ev = DeliveredEvent.for_task(task, delivered_at_ms=DUE + 10**9, attempt=99)
    assert len(delivery_body(ev, task, fmt).encode("utf-8")) <= MAX_EVENT_BYTES
    # AND one more entry is refused as oversize, naming the form measured
    with pytest.raises(RowRejected, match="DynamoDB JSON" if fmt == "cdk-scheduler" else "as JSON") as exc:
        task_from_item(row(over), P, fmt)
    assert exc.value.code == "oversize"


def test_a_payload_within_the_plain_limit_but_over_it_as_dynamodb_json_is_refused_for_cdk_scheduler():
    # GIVEN a payload accepted in Punctual's format whose DynamoDB JSON is over the limit
    ok, _ = largest(plain_size, "punctual")
    assert ddb_size(ok) > MAX_EVENT_BYTES  # would not fit in one SQS message as cdk-scheduler's body
    task_from_item(row(ok), P, "punctual")
    # THEN the cdk-scheduler format refuses it instead of failing the send forever
    with pytest.raises(RowRejected) as exc:
        task_from_item(row(ok), P, "cdk-scheduler")
    assert exc.value.code == "oversize"


# -- the setting -------------------------------------------------------------------------


def test_event_format_defaults_to_punctual_and_round_trips_through_the_environment():
    assert Settings().event_format == load_settings({}).event_format == "punctual"
    s = load_settings({ENV["event_format"]: "cdk-scheduler"})
    assert s.event_format == "cdk-scheduler"
    assert ENV["event_format"] == "PUNCTUAL_EVENT_FORMAT"
    assert to_environment(s)["PUNCTUAL_EVENT_FORMAT"] == "cdk-scheduler"
    assert load_settings(to_environment(s)) == s


@pytest.mark.parametrize("value", ["cdk", "CDK-SCHEDULER", "", "plain"])
def test_an_unknown_event_format_is_refused_naming_the_allowed_values(value):
    with pytest.raises(ValueError, match="event_format must be one of 'punctual', 'cdk-scheduler'"):
        Settings(event_format=value)
    with pytest.raises(ValueError, match="event_format"):
        load_settings({ENV["event_format"]: value})
