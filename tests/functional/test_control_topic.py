"""Direct delivery's control topic (docs/architecture.md, "Direct delivery"): no delay queue and no
consumer; poll requests are published to an SNS topic, which is also the OnFailure destination of
the poller's invocations and of the editor's stream, and the poller serves what it receives
(punctual/core/usecases/serve_controls.py). Over the in-memory AWS, with the exact bodies pinned."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from botocore.exceptions import ClientError

from functions.poller.handler import handler as poller_handler
from punctual.core.arming import read_arm
from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.cron import MINUTE_MS, one_shot_cron
from punctual.core.runtime import Deps
from punctual.core.usecases.ensure_poll import request_poll
from punctual.core.usecases.serve_controls import AskAgain, serve_controls
from punctual.lambda_events import (
    SNS_DESTINATION_MAX_BYTES,
    async_failure_record,
    for_sns_destination,
    sns_event,
    stream_failure_record,
)
from tests.faults import Faults
from tests.reliability.fakeaws import GatedAws

TOPIC = "arn:aws:sns:us-east-1:123456789012:punctual-control"
T0 = 1_798_761_600_000 + 10_000  # 10 s into a minute
POLLER = "arn:aws:lambda:us-east-1:123456789012:function:poller"


@pytest.fixture
def world():
    clock = ManualClock(T0)
    aws = GatedAws(clock)
    s = Settings(delivery="direct", delivery_queue_url="q/delivery", rejected_queue_url="q/rejected",
                 control_topic_arn=TOPIC)
    aws.op_put_rule(Name=s.rule_name, ScheduleExpression="cron(0 0 1 1 ? 2199)", State="DISABLED")
    return Deps(s, clock, aws.ddb, aws.sqs, aws.events, sns=aws.sns), aws


def _event(aws: GatedAws) -> dict:
    """What the topic holds, as the event SNS invokes the poller with (one message)."""
    [p] = aws.take_published()
    return sns_event(p.topic_arn, p.message, p.message_id, p.at_ms)


def test_a_poll_request_is_published_to_the_topic_with_its_body_and_no_delay(world):
    deps, aws = world
    request_poll(deps, T0 + 5 * MINUTE_MS, "an editor could not arm: boom")
    [p] = aws.published
    assert p.topic_arn == TOPIC
    assert json.loads(p.message) == {"request": "poll", "poll_by_ms": T0 + 5 * MINUTE_MS,
                                     "reason": "an editor could not arm: boom"}
    assert aws.queues == {}  # nothing went to a queue
    with pytest.raises(ValueError, match="cannot delay"):
        request_poll(deps, None, "x", delay_seconds=20)


def test_the_poller_arms_the_minute_a_request_asks_for(world):
    deps, aws = world
    due = T0 + 7 * MINUTE_MS
    request_poll(deps, due, "a poll failed")
    out = poller_handler(_event(aws), None, deps)
    minute = due - due % MINUTE_MS
    assert out == {"controls": 1, "poll_by_ms": due}
    assert aws.op_describe_rule(Name=deps.settings.rule_name)["ScheduleExpression"] == one_shot_cron(minute)
    assert read_arm(deps.ddb, deps.settings, deps.clock).armed_ms == minute


def test_a_failure_notice_without_its_payload_arms_the_first_safe_minute(world):
    """Lambda drops an SNS destination record's payloads past 256 KB: still a notice."""
    deps, aws = world
    record = async_failure_record({"big": "x" * SNS_DESTINATION_MAX_BYTES}, POLLER, 3, T0, "boom")
    trimmed = for_sns_destination(record)
    assert "requestPayload" not in trimmed and "responsePayload" not in trimmed
    assert for_sns_destination(async_failure_record({"id": "e"}, POLLER, 3, T0))["requestPayload"] == {"id": "e"}
    deps.sns.publish(TopicArn=TOPIC, Message=json.dumps(trimmed))
    out = serve_controls(_event(aws), deps)
    first_safe = T0 - T0 % MINUTE_MS + MINUTE_MS  # 10 s into the minute: the next one is safe
    assert out == {"controls": 1, "poll_by_ms": T0}  # wanted by its publication
    assert aws.op_describe_rule(Name=deps.settings.rule_name)["ScheduleExpression"] == one_shot_cron(first_safe)


def test_a_stream_notice_hands_the_given_up_batch_to_the_poll(world):
    deps, aws = world
    record = stream_failure_record([{"dynamodb": {"SequenceNumber": "7"}}, {"dynamodb": {"SequenceNumber": "9"}}],
                                   "arn:stream", "arn:editor", 4, T0)
    deps.sns.publish(TopicArn=TOPIC, Message=json.dumps(record))
    serve_controls(_event(aws), deps)
    assert read_arm(deps.ddb, deps.settings, deps.clock).given_up  # the poll takes over what the batch claimed


def test_with_the_rule_failing_the_event_is_retried_and_then_asked_afresh(world):
    """The consumer asks again through the delay queue 20 s later; here Lambda's retries do, and
    when they ran out the OnFailure record (which nests the event) is replaced by one small request."""
    deps, aws = world
    Faults(deps.events).fail("PutRule", "InternalError", times=1_000)
    request_poll(deps, T0 + 2 * MINUTE_MS, "an editor could not arm")
    event = _event(aws)
    with pytest.raises(AskAgain, match="the rule could not be armed"):
        serve_controls(event, deps)
    assert aws.published == []  # Lambda retries the event itself
    record = async_failure_record(event, POLLER, 3, T0 + 3 * MINUTE_MS, "AskAgain")
    deps.clock.set(T0 + 3 * MINUTE_MS)
    deps.sns.publish(TopicArn=TOPIC, Message=json.dumps(for_sns_destination(record)))
    out = serve_controls(_event(aws), deps)
    assert out["asked_again"].startswith("the rule could not be armed")
    [fresh] = aws.published
    assert json.loads(fresh.message)["request"] == "poll"
    assert json.loads(fresh.message)["poll_by_ms"] == T0 + 2 * MINUTE_MS  # the chain keeps its first time
    assert len(fresh.message) < 400  # one small message, not the nested record


def _armed_alone_request(deps: Deps, aws: GatedAws) -> dict:
    """The table refusing writes from now on, a request wanted by T0 served once: the rule armed
    alone, the event raises AskAgain (Lambda retries it); the event."""
    Faults(deps.ddb).fail("UpdateItem", "InternalError", times=1_000)
    request_poll(deps, T0, "a poll failed")
    event = _event(aws)
    with pytest.raises(AskAgain, match="armed alone"):
        serve_controls(event, deps)
    return event

def test_a_chain_for_the_rule_armed_alone_ends_two_minutes_after_its_first_time(world):
    """The table refusing writes: the rule is armed alone and the request goes round (retries, then
    asked afresh) until ARMED_ALONE_ASK_AGAIN_MS after the time first wanted, as the consumer's does."""
    deps, aws = world
    event = _armed_alone_request(deps, aws)
    deps.clock.set(T0 + 3 * MINUTE_MS)  # Lambda's 1 + 2 minutes of retries ran out
    record = async_failure_record(event, POLLER, 3, deps.clock.now_ms(), "AskAgain")
    deps.sns.publish(TopicArn=TOPIC, Message=json.dumps(for_sns_destination(record)))
    serve_controls(_event(aws), deps)  # asked afresh, wanted by T0: 3 minutes ago
    fresh = _event(aws)
    assert json.loads(fresh["Records"][0]["Sns"]["Message"])["poll_by_ms"] == T0
    assert serve_controls(fresh, deps) == {"controls": 1, "poll_by_ms": T0}  # done: no AskAgain
    assert aws.published == []


def test_a_message_that_is_no_control_is_logged_and_skipped(world, capsys):
    deps, aws = world
    deps.sns.publish(TopicArn=TOPIC, Message="not json")
    assert serve_controls(_event(aws), deps) == {"controls": 0}
    assert "poison control message" in capsys.readouterr().out


def test_notices_are_counted_as_function_failures(world, capsys):
    deps, aws = world
    deps.sns.publish(TopicArn=TOPIC, Message=json.dumps(async_failure_record({"id": "e"}, POLLER, 3, T0)))
    serve_controls(_event(aws), deps)
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [m.get("FunctionFailures") for m in emf] == [1]


def test_without_a_topic_nor_a_delay_queue_no_poll_can_be_asked_for(world):
    from punctual.core.usecases.ensure_poll import NoPollRequests

    deps, _ = world
    with pytest.raises(NoPollRequests):
        request_poll(replace(deps, settings=replace(deps.settings, control_topic_arn="")), None, "x")


def test_a_chain_nested_twice_keeps_its_first_time_and_ends_two_minutes_after_it(world):
    """The table refusing writes (the rule armed alone), a request wanted by T0 goes round: Lambda's
    record of its retries (N1, at +60 s: the poller's events live 120 s) is served while the topic
    refuses the publish, so that invocation fails too, and Lambda's record of it (N2, at +120 s)
    nests N1, which nests the request. Served, N2 asks afresh with the request's own time, T0, and
    that request, served at +120 s, ends the chain (ARMED_ALONE_ASK_AGAIN_MS after T0). Kills issue
    42's item 17 mutant: serve_controls following one level of nesting only (the fresh request kept
    N1's time, +60 s, and the chain ran a round longer)."""
    deps, aws = world
    request = _armed_alone_request(deps, aws)
    deps.clock.set(T0 + 60_000)  # the retry failed alike; Lambda's record of it goes to the topic
    deps.sns.publish(TopicArn=TOPIC, Message=json.dumps(async_failure_record(request, POLLER, 2, T0 + 60_000)))
    n1 = _event(aws)
    refusing = Faults(deps.sns).fail("Publish", "InternalError", times=1_000)
    with pytest.raises(ClientError):
        serve_controls(n1, deps)  # asking afresh fails: this invocation fails, and is retried alike
    refusing.clear()
    deps.clock.set(T0 + 120_000)
    deps.sns.publish(TopicArn=TOPIC, Message=json.dumps(async_failure_record(n1, POLLER, 2, T0 + 120_000)))
    n2 = _event(aws)
    assert serve_controls(n2, deps)["asked_again"] == "the rule was armed alone: the meta row could not be written"
    fresh = _event(aws)
    assert json.loads(fresh["Records"][0]["Sns"]["Message"])["poll_by_ms"] == T0  # the chain's first time
    assert serve_controls(fresh, deps) == {"controls": 1, "poll_by_ms": T0}  # done: no AskAgain
    assert aws.published == []
