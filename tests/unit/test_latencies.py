"""The times each function reads from Lambda's event for its self-measurement (punctual.core.latencies),
and the event shapes every emulation builds (punctual.lambda_events, the in-memory SQS) carrying them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from punctual.bench.fakeaws import FakeAws
from punctual.core.clock import ManualClock
from punctual.core.latencies import elapsed_ms, planned_visible_ms, scheduled_minute_ms, stream_created_ms
from punctual.lambda_events import scheduled_event, sqs_record, stream_record

T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z
RULE = "arn:aws:events:us-east-1:123456789012:rule/r"


def test_a_latency_is_never_negative():
    assert (elapsed_ms(T0 + 5, T0), elapsed_ms(T0, T0), elapsed_ms(T0, T0 + 40)) == (5, 0, 0)


@pytest.mark.parametrize("attributes, delay, visible", [
    ({"SentTimestamp": str(T0), "ApproximateReceiveCount": "1"}, 7, T0 + 7_000),
    ({"SentTimestamp": str(T0), "ApproximateReceiveCount": "1"}, 0, T0),
    ({"SentTimestamp": str(T0), "ApproximateReceiveCount": "2"}, 7, None),  # received before: not the plan
    ({"ApproximateReceiveCount": "1"}, 7, None),  # no send time
    ({"SentTimestamp": "x", "ApproximateReceiveCount": "1"}, 7, None),
    ({"SentTimestamp": str(T0), "ApproximateReceiveCount": "1"}, None, None),  # no delay in the body
    (None, 7, None),
])
def test_the_planned_visibility_of_a_first_receive(attributes, delay, visible):
    assert planned_visible_ms(attributes, delay) == visible


@pytest.mark.parametrize("created, ms", [(1_798_761_600.0, T0), (1_798_761_601.999, T0 + 1_000),
                                         (1_798_761_600, T0), (None, None), ("1798761600", None), (True, None)])
def test_a_stream_records_creation_in_whole_seconds(created, ms):
    data = {} if created is None else {"ApproximateCreationDateTime": created}
    assert stream_created_ms({"dynamodb": data}) == ms


@pytest.mark.parametrize("event, minute", [
    (scheduled_event(RULE, T0 + 180_000, "e"), T0 + 180_000),
    ({**scheduled_event(RULE, T0, "e"), "time": "2027-01-01T00:00:59Z"}, T0),  # fired 59 s in: its minute
    ({**scheduled_event(RULE, T0, "e"), "time": "2027-01-01T00:00:00"}, None),  # no zone: not EventBridge's
    ({**scheduled_event(RULE, T0, "e"), "time": "yesterday"}, None),
    ({**scheduled_event(RULE, T0, "e"), "detail-type": "Other"}, None),
    ({"id": "direct invoke"}, None),
    ([], None),
])
def test_the_minute_a_rule_fired_for(event, minute):
    assert scheduled_minute_ms(event) == minute


def test_lambdas_stream_event_gives_whole_epoch_seconds_as_dynamodb_streams_does():
    """DynamoDB Streams rounds ApproximateCreationDateTime down to the second; boto3 gives a datetime,
    the in-memory stream epoch seconds with a fraction: Lambda's event carries 1798761600.0 for both."""
    for created in (datetime.fromtimestamp((T0 + 999) / 1000, tz=UTC), (T0 + 999) / 1000):
        record = stream_record({"eventName": "INSERT", "dynamodb": {"ApproximateCreationDateTime": created}},
                               "arn:stream", "us-east-1")
        assert record["dynamodb"]["ApproximateCreationDateTime"] == 1_798_761_600.0


def test_the_in_memory_sqs_gives_the_attributes_lambdas_event_carries():
    clock = ManualClock(T0)
    aws = FakeAws(clock)
    aws.op_send_message(QueueUrl="q", MessageBody="{}", DelaySeconds=2)
    clock.set(T0 + 2_030)
    [msg] = aws.op_receive_message(QueueUrl="q", VisibilityTimeout=0)["Messages"]
    clock.set(T0 + 2_100)
    [again] = aws.op_receive_message(QueueUrl="q")["Messages"]
    record = sqs_record(again, "arn:aws:sqs:us-east-1:123456789012:q", "us-east-1")
    assert msg["Attributes"] == {"ApproximateReceiveCount": "1", "SentTimestamp": str(T0),
                                 "ApproximateFirstReceiveTimestamp": str(T0 + 2_030)}
    assert record["attributes"] == {"ApproximateReceiveCount": "2", "SentTimestamp": str(T0),
                                    "ApproximateFirstReceiveTimestamp": str(T0 + 2_030)}
