"""Direct delivery on the local stack: the control topic (SNS -> the poller) instead of the delay
queue and the consumer, on a hand-made template shaped like the construct's ``delivery="direct"``
(tests/local/templates.direct_template): provisioning, the SNS driver's events, Lambda's
asynchronous retries and OnFailure destination, and the real handlers end to end."""

from __future__ import annotations

import json
import time

import boto3
import pytest
from moto import mock_aws

from punctual.core.cron import MINUTE_MS
from punctual.core.keys import encode_sk
from punctual.core.usecases.ensure_poll import poll_minute, request_poll
from punctual.lambda_events import armed_minute
from punctual.local import LocalOptions, LocalStack
from punctual.local.drivers import SnsDriver
from punctual.local.provision import Provisioner
from punctual.local.stack import free_port
from tests.local import fake_functions as ff
from tests.local.fake_functions import wait_for
from tests.local.templates import POLLER, TOPIC, direct_template

FAKE = "tests.local.fake_functions.handler"
EDITOR = "SchedulerEditorFnABCDEF12"
SUBSCRIPTION = "SchedulerPollerControlSubscription7A7A7A7A"


def test_a_direct_template_provisions_the_topic_its_lambda_subscription_and_topic_destinations():
    with mock_aws():
        clients = {n: boto3.client(n, region_name="us-east-1") for n in ("dynamodb", "sqs", "events", "sns")}
        model = Provisioner(direct_template(poller=FAKE, editor=FAKE), clients).provision()
        topic = model.topics[TOPIC]
        assert topic.name == "punctual-control-topic"
        assert topic.arn == "arn:aws:sns:us-east-1:123456789012:punctual-control-topic"
        assert [t["TopicArn"] for t in clients["sns"].list_topics()["Topics"]] == [topic.arn]
        sub = model.subscriptions[SUBSCRIPTION]
        dlq = next(q for q in model.queues.values() if q.name == "punctual-rule-dead-letter-queue")
        assert (sub.topic_arn, sub.function, sub.dlq_arn) == (topic.arn, POLLER, dlq.arn)
        # the lambda subscription is the SNS driver's, not moto's (moto would invoke its own Lambda)
        assert clients["sns"].list_subscriptions()["Subscriptions"] == []
        assert model.functions[POLLER].async_on_failure_arn == topic.arn
        assert model.functions[POLLER].async_retries == 2
        stream = next(m for m in model.mappings.values() if m.kind == "dynamodb")
        assert stream.on_failure_arn == topic.arn
        for fn in (POLLER, EDITOR):
            env = model.functions[fn].environment
            assert env["PUNCTUAL_CONTROL_TOPIC_ARN"] == topic.arn and "PUNCTUAL_DELAY_QUEUE_URL" not in env
        assert not any(m.kind == "sqs" for m in model.mappings.values())
        assert model.ignored["AWS::SNS::TopicPolicy"] == 1 and model.ignored["AWS::Lambda::Permission"] == 1


@pytest.fixture
def local(tmp_path):
    path = tmp_path / "template.json"
    path.write_text(json.dumps(direct_template(poller=FAKE, editor=FAKE)))
    ff.CALLS.clear()
    ff.FAIL_IDS.clear()
    stack = LocalStack(LocalOptions(port=free_port(), state_dir=tmp_path, template=path, rule_delay_s=0.0,
                                    async_retry_delays_s=(0.2, 0.3)), out=lambda *_: None)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def sns_calls():
    return [e for k, e in ff.CALLS if k == "sns"]


def test_a_message_published_to_the_topic_invokes_the_poller_with_an_sns_event(local):
    info = json.loads((local.opts.state_dir / "local.json").read_text())
    topic = local.model.topics[TOPIC].arn
    assert (info["delivery"], info["control_topic"]) == ("direct", topic)
    assert "delay" not in info["queues"] and info["queues"]["rule_dlq"].endswith("/punctual-rule-dead-letter-queue")
    assert [d.name for d in local.drivers if isinstance(d, SnsDriver)] == ["sns:punctual-control-topic"]
    poller = local.functions[POLLER]
    assert poller.deps.sns is not None  # the functions publish through the endpoint, as in Lambda
    before = int(time.time() * 1000)
    mid = local.clients["sns"].publish(TopicArn=topic, Message="hello")["MessageId"]
    assert mid and wait_for(lambda: len(sns_calls()) == 1)
    (record,) = sns_calls()[0]["Records"]
    assert record["EventSource"] == "aws:sns" and record["EventSubscriptionArn"].startswith(topic)
    sns = record["Sns"]
    assert (sns["TopicArn"], sns["Message"], sns["Type"]) == (topic, "hello", "Notification")
    assert sns["MessageId"] and sns["Timestamp"] >= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(before // 1000))
    # a poll request from a function's own deps (ensure_poll.request_poll) takes the same path
    request_poll(poller.deps, before + 60_000, "a test asks")
    assert wait_for(lambda: len(sns_calls()) == 2)
    assert json.loads(sns_calls()[1]["Records"][0]["Sns"]["Message"])["poll_by_ms"] == before + 60_000
    time.sleep(0.3)
    assert len(sns_calls()) == 2  # each message once


def test_a_failing_invocation_is_retried_then_goes_to_its_on_failure_destination_the_topic(local):
    topic = local.model.topics[TOPIC].arn
    ff.FAIL_IDS.add("doomed")
    local.clients["sns"].publish(TopicArn=topic, Message="doomed")
    # the first attempt, 2 retries (MaximumRetryAttempts), then the invocation record is published to
    # the poller's OnFailure destination, the topic, which invokes the poller with it
    assert wait_for(lambda: len(sns_calls()) == 4, timeout=8)
    messages = [e["Records"][0]["Sns"]["Message"] for e in sns_calls()]
    assert messages[:3] == ["doomed"] * 3
    assert len({e["Records"][0]["Sns"]["MessageId"] for e in sns_calls()[:3]}) == 1  # the same event retried
    notice = json.loads(messages[3])
    assert notice["requestContext"]["condition"] == "RetriesExhausted"
    assert notice["requestContext"]["approximateInvokeCount"] == 3
    assert notice["requestContext"]["functionArn"].startswith(local.model.functions[POLLER].arn)
    assert notice["requestPayload"] == sns_calls()[0]
    sns_driver = next(d for d in local.drivers if isinstance(d, SnsDriver))
    assert sns_driver.source.counters["sns_retries"] == 2 and sns_driver.retrying == 0
    time.sleep(0.6)
    assert len(sns_calls()) == 4  # the notice itself succeeded: no more


def test_real_handlers_deliver_in_direct_mode_and_serve_poll_requests(tmp_path):
    """End to end with the real poller and editor on the direct template: rows due in 1-2 s go out
    through the editor's direct sends (never early), and a poll request published to the control
    topic makes the real poller arm the rule, which fires the poll."""
    path = tmp_path / "template.json"
    path.write_text(json.dumps(direct_template()))
    stack = LocalStack(LocalOptions(port=free_port(), state_dir=tmp_path, template=path, rule_delay_s=0.0,
                                    write_files=False), out=lambda *_: None)
    with stack:
        s = stack.settings
        assert s is not None and s.direct and s.control_topic_arn == stack.model.topics[TOPIC].arn
        ddb, sqs = stack.clients["dynamodb"], stack.clients["sqs"]
        now = int(time.time() * 1000)
        due = {encode_sk(now + ms, f"direct-{ms}"): now + ms for ms in (1000, 1600, 2300)}
        for sk in due:
            ddb.put_item(TableName=s.table_name, Item={"pk": {"S": "scheduler"}, "sk": {"S": sk},
                                                        "payload": {"M": {"sk": {"S": sk}}}})
        poller = stack.functions[POLLER]
        request_poll(poller.deps, None, "e2e: a poll wanted now")
        got: list[tuple[dict, int]] = []
        end = time.monotonic() + 10
        while time.monotonic() < end and set(due) - {e["key"] for e, _ in got}:
            msgs = sqs.receive_message(QueueUrl=s.delivery_queue_url, MaxNumberOfMessages=10,
                                       WaitTimeSeconds=0).get("Messages", [])
            t = int(time.time() * 1000)
            got += [(json.loads(m["Body"]), t) for m in msgs]
            for m in msgs:
                sqs.delete_message(QueueUrl=s.delivery_queue_url, ReceiptHandle=m["ReceiptHandle"])
            time.sleep(0.02)
        assert {e["key"] for e, _ in got} == set(due)
        for event, received in got:
            assert received >= event["due_ms"] == due[event["key"]] and event["lateness_ms"] >= 0
        # the poller served the request: the rule armed for the first minute still safe to arm
        # (ensure_poll.poll_minute; its firing up to a minute away is the rule driver's, tested elsewhere)
        wanted = poll_minute(None, now)
        assert wait_for(lambda: armed_minute(stack.clients["events"].describe_rule(Name=s.rule_name)) in (
            wanted, wanted + MINUTE_MS), timeout=5), "the poll request armed no poll"
        sns = next(d for d in stack.drivers if isinstance(d, SnsDriver))
        assert sns.messages == 1 and poller.invocations >= 1
        assert poller.errors == 0 and stack.functions[EDITOR].errors == 0
