"""Self-measurement (docs/construct.md, "Self-measurement"): each function emits, with its metrics and
from Lambda's event alone, the AWS-side latency the design rests on. Through the Lambda handlers,
over the in-memory AWS, at known virtual times: every value pinned with its name, unit, namespace
and dimension."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

from functions.consumer.handler import handler as consumer_handler
from functions.editor.handler import handler as editor_handler
from functions.poller.handler import handler as poller_handler
from punctual.core import observability as obs
from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.cron import MINUTE_MS
from punctual.core.keys import encode_sk
from punctual.core.metrics_names import (
    COLD_STARTS,
    INSTANCE_DIMENSION,
    PICKUP_MS,
    POLL_DELAY_MS,
    STREAM_LAG_MS,
)
from punctual.core.models import DelayGroup
from punctual.core.runtime import Deps
from punctual.lambda_events import scheduled_event, sns_event
from tests.reliability.fakeaws import GatedAws

T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z, a minute's start
RULE = "arn:aws:events:us-east-1:123456789012:rule/punctual-poll"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:delay"
SELF = (PICKUP_MS, COLD_STARTS, POLL_DELAY_MS, STREAM_LAG_MS)


@pytest.fixture
def emf():
    """The EMF records written, as (metric name -> (unit, values)) per record, with its directive checked:
    the construct's namespace and exactly the Instance dimension."""
    buf = io.StringIO()
    obs.set_stream(buf)

    def read() -> list[dict[str, tuple[str, list[float]]]]:
        out = []
        for rec in map(json.loads, buf.getvalue().splitlines()):
            if "_aws" not in rec:
                continue
            (directive,) = rec["_aws"]["CloudWatchMetrics"]
            assert directive["Namespace"] == "Acme" and directive["Dimensions"] == [[INSTANCE_DIMENSION]]
            assert rec[INSTANCE_DIMENSION] == "orders"
            out.append({m["Name"]: (m["Unit"], rec[m["Name"]] if isinstance(rec[m["Name"]], list)
                                    else [rec[m["Name"]]]) for m in directive["Metrics"]})
        return out

    yield read
    obs.set_stream(None)


def self_measured(records: list[dict[str, tuple[str, list[float]]]]) -> dict[str, tuple[str, list[float]]]:
    """The self-measurement metrics of ``records``, values in order."""
    out: dict[str, tuple[str, list[float]]] = {}
    for rec in records:
        for name, (unit, values) in rec.items():
            if name in SELF:
                out[name] = (unit, out.get(name, (unit, []))[1] + values)
    return out


def world(now_ms: int, **settings) -> tuple[Deps, GatedAws]:
    """A new execution environment (its Deps: its first invocation is a cold start) over the in-memory AWS."""
    clock = ManualClock(now_ms)
    aws = GatedAws(clock)
    s = Settings(**{"table_name": aws.table_name, "delay_queue_url": "q/delay", "delivery_queue_url": "q/delivery",
                    "rejected_queue_url": "q/rejected", "instance_name": "orders", "metrics_namespace": "Acme",
                    **settings})
    aws.op_put_rule(Name=s.rule_name, ScheduleExpression="cron(0 0 1 1 ? 2199)", State="DISABLED")
    return Deps(s, clock, aws.ddb, aws.sqs, aws.events, sns=aws.sns if s.control_topic_arn else None), aws


def context(request_id: str) -> SimpleNamespace:
    return SimpleNamespace(function_name="fn", aws_request_id=request_id,
                           get_remaining_time_in_millis=lambda: 30_000)


def sqs_record(mid: str, body: str, sent_ms: int, receive_count: int = 1) -> dict:
    return {"messageId": mid, "receiptHandle": f"h-{mid}", "body": body, "eventSourceARN": QUEUE_ARN,
            "attributes": {"ApproximateReceiveCount": str(receive_count), "SentTimestamp": str(sent_ms),
                           "ApproximateFirstReceiveTimestamp": str(sent_ms + 1)}}


# ------------------------------------------------------------------------------ consumer
def test_the_consumer_emits_each_first_received_pointers_pick_up_and_its_cold_start(emf):
    # GIVEN four pointer messages in one batch, their rows due at T0 + 900 ms (woken a second early)
    deps, aws = world(T0 + 137)
    sk = [encode_sk(T0 + 900, f"r{i}") for i in range(4)]
    for key in sk:
        aws.ddb.put_item(TableName=deps.settings.table_name, Item={
            "pk": {"S": "scheduler"}, "sk": {"S": key}, "payload": {"M": {}},
            "punctual_attempt": {"N": "1"}, "punctual_enqueued_ms": {"N": str(T0 - 10_000)}})

    def body(key: str, delay_seconds: int | None) -> str:
        return DelayGroup.body_of("scheduler", [(key, T0 + 900, 1)], T0 - 10_000, delay_seconds=delay_seconds)

    event = {"Records": [
        # sent at T0 - 5 s with 5 s of delay: planned visible at T0, the handler starts at T0 + 137
        sqs_record("m0", body(sk[0], 5), sent_ms=T0 - 5_000),
        # sent at T0 - 12.5 s with 12 s: planned visible at T0 - 500 ms
        sqs_record("m1", body(sk[1], 12), sent_ms=T0 - 12_500),
        # received before (a put-back, a visibility timeout): not the planned visibility's pick-up
        sqs_record("m2", body(sk[2], 5), sent_ms=T0 - 5_000, receive_count=2),
        # a body from before the delay was carried: unknown, not measured
        sqs_record("m3", body(sk[3], None), sent_ms=T0 - 5_000),
    ]}
    # WHEN the consumer's handler runs, first in its execution environment
    assert consumer_handler(event, context("req-1"), deps) == {"batchItemFailures": []}
    # THEN its one EMF record carries the two first receives' pick-ups and one cold start
    (first,) = emf()
    assert self_measured([first]) == {PICKUP_MS: ("Milliseconds", [137, 637]), COLD_STARTS: ("Count", [1])}

    # WHEN the same environment runs again (a warm start), a message early on its planned visibility
    deps.clock.set(T0 + 60_000)
    key = encode_sk(T0 + 60_000, "late")
    aws.ddb.put_item(TableName=deps.settings.table_name, Item={
        "pk": {"S": "scheduler"}, "sk": {"S": key}, "payload": {"M": {}},
        "punctual_attempt": {"N": "1"}, "punctual_enqueued_ms": {"N": str(T0)}})
    early = DelayGroup.body_of("scheduler", [(key, T0 + 60_000, 1)], T0, delay_seconds=60)
    consumer_handler({"Records": [sqs_record("m4", early, sent_ms=T0 + 40)]}, context("req-2"), deps)
    # THEN no cold start, and the early arrival counts 0 (never negative: CloudWatch would drop the
    # period's percentiles)
    assert self_measured(emf()[1:]) == {PICKUP_MS: ("Milliseconds", [0])}


# ------------------------------------------------------------------------------ poller
@pytest.mark.parametrize("time_field", ["2027-01-01T00:03:00Z", "2027-01-01T00:03:17Z"])
def test_the_poller_emits_its_delay_from_the_minute_the_rule_fired_for(emf, time_field):
    # GIVEN the rule's Scheduled Event for 00:03 (its time as our emulations write it, or with the
    # seconds of AWS's example event: the minute is the same), the poller starting at 00:03:23.456
    deps, _ = world(T0 + 3 * MINUTE_MS + 23_456)
    event = {**scheduled_event(RULE, T0 + 3 * MINUTE_MS, "ev-1"), "time": time_field}
    # WHEN the poller's handler runs
    poller_handler(event, context("req-1"), deps)
    # THEN it emits the delay, once, in ms
    assert self_measured(emf()) == {POLL_DELAY_MS: ("Milliseconds", [23_456])}


def test_a_poller_invocation_no_schedule_made_emits_no_delay(emf):
    # GIVEN a direct invoke (the deploy-time resync's) and a control topic's message
    deps, _ = world(T0 + 5_000, delivery="direct", delay_queue_url="", control_topic_arn="arn:aws:sns:t")
    poller_handler({}, context("req-1"), deps)
    request = json.dumps({"request": "poll", "poll_by_ms": T0 + MINUTE_MS, "reason": "test"})
    poller_handler(sns_event("arn:aws:sns:t", request, "m1", T0), context("req-2"), deps)
    # THEN neither emits a poll delay: no minute fired them
    assert POLL_DELAY_MS not in self_measured(emf())


# ------------------------------------------------------------------------------ editor
def stream_insert(seq: int, due_ms: int, created: float | None) -> dict:
    row = {"pk": {"S": "scheduler"}, "sk": {"S": encode_sk(due_ms, f"s{seq}")}, "payload": {"M": {}}}
    data = {"Keys": {k: row[k] for k in ("pk", "sk")}, "NewImage": row, "SequenceNumber": str(seq),
            "StreamViewType": "NEW_AND_OLD_IMAGES"}
    if created is not None:
        data["ApproximateCreationDateTime"] = created
    return {"eventID": str(seq), "eventName": "INSERT", "eventSource": "aws:dynamodb", "dynamodb": data}


def test_the_editor_emits_each_records_lag_from_its_creation_second(emf):
    # GIVEN three records of rows due in an hour, created at T0 and T0 + 1 s (epoch seconds, as Lambda's
    # event gives them; a fraction is rounded down as DynamoDB Streams does) and one without the time
    deps, aws = world(T0 + 2_345)
    records = [stream_insert(1, T0 + 3_600_000, T0 / 1000), stream_insert(2, T0 + 3_600_000, T0 / 1000 + 1.7),
               stream_insert(3, T0 + 3_600_000, None)]
    for r in records:
        aws.ddb.put_item(TableName=deps.settings.table_name, Item=r["dynamodb"]["NewImage"])
    # WHEN the editor's handler runs at T0 + 2.345 s
    assert editor_handler({"Records": records}, context("req-1"), deps) == {"batchItemFailures": []}
    # THEN each dated record's lag, in order, in one record
    assert self_measured(emf()) == {STREAM_LAG_MS: ("Milliseconds", [2_345, 1_345])}
