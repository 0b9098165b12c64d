"""Invariant 9, payload fidelity, through the consumer against moto: numbers are delivered with
every digit of the row (DynamoDB keeps 38, a float 17) in both event formats, and a payload without
such numbers is delivered byte for byte as before (issue 28)."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

import pytest

from punctual import PunctualClient
from punctual.core.keys import encode_sk
from tests.consumer_support import enqueue, receive_event, run_consumer
from tests.support import T0_MS

DUE = T0_MS + 1_000
SK = encode_sk(DUE, "order-42")

# The issue's two numbers, a 38-digit integer, negative exponents (DynamoDB's smallest magnitude
# among them), a set of numbers, and exact numbers nested in a list.
EXACT_AV = {"M": {
    "pi": {"N": "3.1415926535897932384626433832795028841"},
    "big": {"N": "123456789012345678.91"},
    "int38": {"N": "12345678901234567890123456789012345678"},
    "tiny": {"N": "1E-130"},
    "neg_exp": {"N": "-1.5E-7"},
    "ns": {"NS": ["2.000000000000000000000000000000000001", "-0.1", "7"]},
    "list": {"L": [{"N": "0.1"}, {"M": {"rate": {"N": "0.3333333333333333333333333333333333333"}}}]},
}}
EXACT_PLAIN = (
    '{"big":123456789012345678.91,"int38":12345678901234567890123456789012345678,'
    '"list":[0.1,{"rate":0.3333333333333333333333333333333333333}],"neg_exp":-1.5E-7,'
    '"ns":[-0.1,2.000000000000000000000000000000000001,7],'
    '"pi":3.1415926535897932384626433832795028841,"tiny":1E-130}'
)

# Every other kind of value: the delivered body of this row is pinned as the code before exact
# numbers wrote it (computed with that code), byte for byte.
ORDINARY_AV = {"M": {
    "order": {"N": "42"}, "big": {"N": "12345678901234567890123456789012345678"}, "neg": {"N": "-7"},
    "name": {"S": 'Zoë é中 "q" \\ \n'}, "ok": {"BOOL": True}, "no": {"BOOL": False}, "none": {"NULL": True},
    "half": {"N": "1.5"}, "tags": {"SS": ["b", "a"]}, "ids": {"NS": ["10", "2", "-3"]},
    "blob": {"B": b"\x00\xffbin"}, "blobs": {"BS": [b"z", b"a"]},
    "nested": {"M": {"list": {"L": [{"N": "1"}, {"S": "x"}, {"M": {"deep": {"L": []}}}, {"M": {}}]}}},
}}
ORDINARY_BODY = (
    '{"attempt":1,"delivered_at":"2027-01-01T00:00:01.000Z","delivered_at_ms":1798761601000,'
    '"due":"2027-01-01T00:00:01.000Z","due_ms":1798761601000,"event_id":"bc656ec5-15ba-57b6-879a-adb52261de1d",'
    '"id":"order-42","key":"1798761601000#order-42","lateness_ms":0,'
    '"payload":{"big":12345678901234567890123456789012345678,"blob":"AP9iaW4=","blobs":["YQ==","eg=="],'
    '"half":1.5,"ids":[-3,2,10],"name":"Zoë é中 \\"q\\" \\\\ \\n","neg":-7,'
    '"nested":{"list":[1,"x",{"deep":[]},{}]},"no":false,"none":null,"ok":true,"order":42,"tags":["a","b"]},'
    '"publicationTimestamp":1798761601000}'
)


def use_format(stack, event_format):
    stack.deps.settings = dataclasses.replace(stack.deps.settings, event_format=event_format)


def deliver_row(stack, frozen, payload_av) -> str:
    """Insert the row, let the consumer deliver it at its due time, return the delivered body."""
    stack.ddb.put_item(TableName=stack.settings.table_name,
                       Item={"pk": {"S": "scheduler"}, "sk": {"S": SK}, "payload": payload_av})
    enqueue(stack, SK, DUE, delay_seconds=1)
    frozen.tick(1.0)
    assert run_consumer(stack, receive_event(stack)) == {"batchItemFailures": []}
    [message] = stack.drain(stack.settings.delivery_queue_url)
    assert stack.rows() == []
    return str(message["Body"])


def test_numbers_are_delivered_with_every_digit_in_punctuals_event(stack, frozen):
    """The issue's 3.1415926535897932384626433832795028841 was delivered as 3.141592653589793 and
    123456789012345678.91 as 1.2345678901234568e+17 (to_plain made floats)."""
    body = deliver_row(stack, frozen, EXACT_AV)
    assert '"payload":' + EXACT_PLAIN + "," in body
    event = json.loads(body, parse_float=Decimal)
    assert event["payload"]["pi"] == Decimal("3.1415926535897932384626433832795028841")
    assert event["payload"]["big"] == Decimal("123456789012345678.91")
    assert event["payload"]["int38"] == 12345678901234567890123456789012345678
    assert event["payload"]["tiny"] == Decimal("1E-130") and event["payload"]["neg_exp"] == Decimal("-0.00000015")


def test_numbers_are_delivered_with_every_digit_in_cdk_schedulers_event(stack, frozen):
    use_format(stack, "cdk-scheduler")
    body = deliver_row(stack, frozen, EXACT_AV)
    event = json.loads(body)
    assert event["publicationTimestamp"] == str(DUE)  # a string, as cdk-scheduler 0.1.3 sends it
    assert event["payload"] == json.loads(json.dumps(EXACT_AV))  # every N text as the row holds it
    assert '"pi":{"N":"3.1415926535897932384626433832795028841"}' in body
    assert '"big":{"N":"123456789012345678.91"}' in body


def test_a_payload_without_such_numbers_is_delivered_byte_for_byte_as_before(stack, frozen):
    assert deliver_row(stack, frozen, ORDINARY_AV) == ORDINARY_BODY


def test_the_client_reads_payload_numbers_exactly(stack):
    """get / list / find give Decimal for non-integral numbers, with every digit."""
    client = PunctualClient(stack.settings.table_name, ddb=stack.ddb, clock=stack.deps.clock)
    stack.ddb.put_item(TableName=stack.settings.table_name, Item={
        "pk": {"S": "scheduler"}, "sk": {"S": SK}, "payload": EXACT_AV})
    expected = {
        "pi": Decimal("3.1415926535897932384626433832795028841"), "big": Decimal("123456789012345678.91"),
        "int38": 12345678901234567890123456789012345678, "tiny": Decimal("1E-130"), "neg_exp": Decimal("-1.5E-7"),
        "ns": [Decimal("-0.1"), Decimal("2.000000000000000000000000000000000001"), 7],
        "list": [Decimal("0.1"), {"rate": Decimal("0.3333333333333333333333333333333333333")}],
    }
    got = [client.get(SK), *client.list(), *client.find("order-42")]
    assert [t.payload for t in got] == [expected] * 3
    assert all(str(t.payload["pi"]) == "3.1415926535897932384626433832795028841" for t in got)


def test_the_client_writes_a_decimal_with_every_digit(stack):
    client = PunctualClient(stack.settings.table_name, ddb=stack.ddb, clock=stack.deps.clock)
    task = client.schedule(DUE, {"amount": Decimal("123456789012345678.91"), "f": 0.1}, id="order-42")
    [row] = stack.rows()
    assert row["payload"] == {"M": {"amount": {"N": "123456789012345678.91"}, "f": {"N": "0.1"}}}
    assert task.payload == {"amount": Decimal("123456789012345678.91"), "f": Decimal("0.1")}


@pytest.mark.parametrize("extra, accepted", [(0, True), (1, False)])
def test_the_size_limit_measures_the_exact_text(extra, accepted):
    """MAX_PAYLOAD_BYTES counts the payload as delivered: 38 digits a number, not a float's 17."""
    from punctual.core.models import MAX_PAYLOAD_BYTES, RowRejected, dumps, task_from_item

    number = "0." + "1" * 37  # 39 characters delivered (a float would write 19)
    count = 6_000  # 240,000 bytes of numbers; as floats they would take 120,000
    pad = MAX_PAYLOAD_BYTES - (len('{"n":[],"p":""}') + count * (len(number) + 1) - 1) + extra
    payload = {"M": {"n": {"L": [{"N": number}] * count}, "p": {"S": "x" * pad}}}
    item = {"pk": {"S": "scheduler"}, "sk": {"S": SK}, "payload": payload}
    if accepted:
        task = task_from_item(item, "scheduler")
        assert len(dumps(task.payload).encode()) == MAX_PAYLOAD_BYTES
    else:
        with pytest.raises(RowRejected, match="oversize"):
            task_from_item(item, "scheduler")
