"""The consumer, against moto, with ``event_format="cdk-scheduler"``: the delivery-queue body is
cdk-scheduler's, logs and metrics are unchanged, and a row too big in that shape is rejected."""

from __future__ import annotations

import dataclasses
import io
import json

from punctual.core import observability as obs
from punctual.core.keys import encode_sk
from punctual.core.models import MAX_EVENT_BYTES, MAX_PAYLOAD_BYTES, event_id
from tests.consumer_support import enqueue, receive_event, run_consumer
from tests.support import T0_MS


def cdk_format(stack):
    stack.deps.settings = dataclasses.replace(stack.deps.settings, event_format="cdk-scheduler")


def put_row(stack, sk, payload_av):
    stack.ddb.put_item(TableName=stack.settings.table_name, Item={
        "pk": {"S": stack.settings.partition_key_value}, "sk": {"S": sk}, "payload": payload_av})


def deliver(stack, frozen, sk, due):
    enqueue(stack, sk, due, delay_seconds=1)
    frozen.tick(1.0)
    return run_consumer(stack, receive_event(stack))


def bodies(stack, url=None):
    return [m["Body"] for m in stack.drain(url or stack.settings.delivery_queue_url)]


def test_cdk_scheduler_format_delivers_cdk_schedulers_body(stack, frozen):
    # GIVEN a consumer set to cdk-scheduler's format and a row as a cdk-scheduler user writes it
    cdk_format(stack)
    due = T0_MS + 1_000
    sk = encode_sk(due, "order-42")
    put_row(stack, sk, {"M": {"order": {"N": "42"}, "price": {"N": "1.50"}, "ok": {"BOOL": True},
                              "items": {"L": [{"S": "a"}, {"NULL": True}]}}})
    # WHEN it is delivered
    assert deliver(stack, frozen, sk, due) == {"batchItemFailures": []}
    # THEN the delivery-queue body is exactly cdk-scheduler's (payload attribute unchanged)
    assert bodies(stack) == [
        '{"publicationTimestamp":"' + str(due) + '","payload":{"M":{"items":{"L":[{"S":"a"},{"NULL":true}]},'
        '"ok":{"BOOL":true},"order":{"N":"42"},"price":{"N":"1.50"}}}}'
    ]
    assert stack.rows() == []


def test_cdk_scheduler_format_keeps_the_consumers_log_line(stack, frozen):
    buf = io.StringIO()
    obs.set_stream(buf)
    try:
        cdk_format(stack)
        due = T0_MS + 1_000
        sk = encode_sk(due, "t")
        put_row(stack, sk, {"M": {"a": {"N": "1"}}})
        deliver(stack, frozen, sk, due)
    finally:
        obs.set_stream(None)
    [line] = [json.loads(x) for x in buf.getvalue().splitlines() if '"delivered"' in x and "_aws" not in x]
    assert event_id(line["pk"], line["keys"][0]) == event_id("scheduler", sk) and line["lateness_ms"] == [0]


def test_a_payload_just_under_the_limit_as_dynamodb_json_is_delivered(stack, frozen):
    # GIVEN a payload whose DynamoDB JSON is a few bytes under the validation limit
    cdk_format(stack)
    due = T0_MS + 1_000
    sk = encode_sk(due, "big")
    filler = MAX_PAYLOAD_BYTES - len('{"M":{"s":{"S":""}}}') - 5
    put_row(stack, sk, {"M": {"s": {"S": "x" * filler}}})
    # WHEN it is delivered, THEN the send succeeds (SQS's 256 KiB) and the row is gone
    assert deliver(stack, frozen, sk, due) == {"batchItemFailures": []}
    [body] = bodies(stack)
    assert MAX_PAYLOAD_BYTES < len(body.encode()) <= MAX_EVENT_BYTES
    assert json.loads(body)["payload"]["M"]["s"]["S"] == "x" * filler
    assert stack.rows() == []


def test_a_row_over_the_limit_only_as_dynamodb_json_is_rejected_not_retried(stack, frozen):
    # GIVEN a payload of many small numbers: ~200 KB as plain JSON, ~600 KB as DynamoDB JSON
    cdk_format(stack)
    due = T0_MS + 1_000
    sk = encode_sk(due, "wide")
    put_row(stack, sk, {"M": {"n": {"L": [{"N": "1"}] * 60_000}}})
    # WHEN the consumer reaches it
    assert deliver(stack, frozen, sk, due) == {"batchItemFailures": []}
    # THEN nothing is delivered; the row goes to the rejected queue as oversize
    assert bodies(stack) == []
    [rejected] = [json.loads(b) for b in bodies(stack, stack.settings.rejected_queue_url)]
    assert rejected["code"] == "oversize" and "DynamoDB JSON" in rejected["reason"]
    assert stack.rows() == []


def test_the_editor_and_the_poller_reject_such_a_row_when_they_read_it_not_at_its_due_time(stack, frozen):
    """The size check uses the chosen format everywhere a row is validated: a row only too big as
    DynamoDB JSON is refused by the editor when written (and by the poller's window read), not
    claimed, sent and refused by the consumer at its due time."""
    from punctual.core.usecases.poll import poll
    from punctual.core.usecases.process_stream import process_stream
    from tests.support import StreamReader

    cdk_format(stack)
    stack.settings = stack.deps.settings
    reader = StreamReader(stack)
    near, far = encode_sk(T0_MS + 5_000, "near"), encode_sk(T0_MS + 2 * 3_600_000, "far")
    for sk in (near, far):
        put_row(stack, sk, {"M": {"n": {"L": [{"N": "1"}] * 60_000}}})
    assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}
    assert stack.drain(stack.settings.delay_queue_url) == []  # nothing claimed or sent
    rejected = [json.loads(b) for b in bodies(stack, stack.settings.rejected_queue_url)]
    assert sorted(r["sk"] for r in rejected) == sorted([near, far])
    assert {r["code"] for r in rejected} == {"oversize"} and stack.rows() == []
    # the poller's window read too
    put_row(stack, near, {"M": {"n": {"L": [{"N": "1"}] * 60_000}}})
    assert poll(stack.deps).rejected == 1 and stack.rows() == []
