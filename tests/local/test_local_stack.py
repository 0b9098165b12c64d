"""The template walker and the drivers, in-process, on a small construct-shaped template.

The functions are stand-ins (tests/local/fake_functions.py) that record their events, so
this checks what the local stack does around any handler: resources derived from the
template, Lambda-shaped events, batchItemFailures, DLQ redrive, stream retries, the rule.
"""

from __future__ import annotations

import json
import time

import pytest

from punctual.core.cron import floor_minute, one_shot_cron
from punctual.local import LocalOptions, LocalStack
from punctual.local.stack import free_port
from tests.local import fake_functions as ff
from tests.local.fake_functions import wait_for
from tests.local.templates import mini_template

FAKE = "tests.local.fake_functions.handler"


@pytest.fixture
def local(tmp_path):
    template = mini_template(poller=FAKE, consumer=FAKE, editor=FAKE, max_receives=2)
    template["Resources"]["SchedulerDelayQueue5A6B7C8D"]["Properties"]["VisibilityTimeout"] = 1
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template))
    ff.CALLS.clear()
    ff.FAIL_IDS.clear()
    stack = LocalStack(LocalOptions(port=free_port(), state_dir=tmp_path, template=path,
                                    state_file=tmp_path / "state.json", rule_delay_s=0.0),
                       out=lambda *_: None)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def calls(kind):
    return [e for k, e in ff.CALLS if k == kind]


def test_resources_come_from_the_template(local):
    m = local.model
    assert [t.name for t in m.tables.values()] == ["punctual-table"]
    assert set(q.name for q in m.queues.values()) == {
        "punctual-delay-dlq", "punctual-delay-queue", "punctual-delivery-dlq", "punctual-delivery-queue",
        "punctual-rejected-queue", "punctual-rule-dead-letter-queue"}
    delay = next(q for q in m.queues.values() if q.name == "punctual-delay-queue")
    attrs = local.clients["sqs"].get_queue_attributes(QueueUrl=delay.url, AttributeNames=["All"])["Attributes"]
    assert json.loads(attrs["RedrivePolicy"])["deadLetterTargetArn"].endswith(":punctual-delay-dlq")
    assert attrs["VisibilityTimeout"] == "1"
    s = local.settings
    assert (s.table_name, s.rule_name, s.delay_queue_url) == ("punctual-table", "punctual-rule", delay.url)
    rule = local.clients["events"].describe_rule(Name="punctual-rule")
    assert rule["State"] == "DISABLED" and rule["Description"] == "Punctual poller trigger for PunctualLocal"
    kinds = sorted((mp.kind, m.functions[mp.function].handler, mp.report_batch_item_failures)
                   for mp in m.mappings.values())
    assert kinds == [("dynamodb", FAKE, True), ("sqs", FAKE, True)]
    assert m.ignored["AWS::IAM::Role"] == 1
    assert json.loads((local.opts.state_dir / "local.json").read_text())["queues"]["delivery"] == s.delivery_queue_url


def test_sqs_driver_deletes_successes_and_leaves_failures_to_the_dlq(local):
    sqs, s = local.clients["sqs"], local.settings
    ff.FAIL_IDS.add("poison")
    for body in ("ok-1", "poison", "ok-2"):
        sqs.send_message(QueueUrl=s.delay_queue_url, MessageBody=body)
    dlq = local.queue_roles()["delay_dlq"]

    def in_dlq():
        a = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
        return a["ApproximateNumberOfMessages"] == "1"

    assert wait_for(in_dlq, timeout=8)
    records = [r for e in calls("consume") for r in e["Records"]]
    bodies = [r["body"] for r in records]
    assert bodies.count("ok-1") == 1 and bodies.count("ok-2") == 1  # deleted after success
    assert bodies.count("poison") == 2  # maxReceiveCount 2, then the redrive moved it
    poison = [r for r in records if r["body"] == "poison"]
    assert [r["attributes"]["ApproximateReceiveCount"] for r in poison] == ["1", "2"]
    assert poison[0]["eventSource"] == "aws:sqs" and poison[0]["eventSourceARN"].endswith(":punctual-delay-queue")


def test_stream_driver_retries_from_the_failed_record(local):
    ddb, table = local.clients["dynamodb"], local.settings.table_name
    ff.FAIL_IDS.add("2#b")
    for sk in ("1#a", "2#b", "3#c"):
        ddb.put_item(TableName=table, Item={"pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": {"M": {}}})
    ddb.delete_item(TableName=table, Key={"pk": {"S": "scheduler"}, "sk": {"S": "1#a"}})

    def seen():
        return [(r["eventName"], r["dynamodb"]["Keys"]["sk"]["S"]) for e in calls("stream") for r in e["Records"]]

    assert wait_for(lambda: seen().count(("INSERT", "2#b")) == 2 and ("REMOVE", "1#a") in seen())
    s = seen()
    assert s.count(("INSERT", "1#a")) == 1  # before the failure: not re-sent
    assert s.count(("INSERT", "3#c")) in (1, 2)  # re-sent with it when it was in the same batch
    assert s.index(("INSERT", "3#c")) > s.index(("INSERT", "2#b"))  # order kept
    record = calls("stream")[0]["Records"][0]
    assert record["eventSource"] == "aws:dynamodb" and record["eventSourceARN"] == local.model.tables[
        "SchedulerTable0C1D2E3F"].stream_arn
    assert isinstance(record["dynamodb"]["ApproximateCreationDateTime"], float)


def test_rule_driver_fires_the_armed_minute_once(local):
    events = local.clients["events"]
    minute = floor_minute(int(time.time() * 1000))  # a started minute: fires at once (delay 0 s)
    events.put_rule(Name="punctual-rule", ScheduleExpression=one_shot_cron(minute), State="ENABLED")
    assert wait_for(lambda: len(calls("poll")) == 1, timeout=3)
    assert calls("poll")[0]["token"].startswith(f"local-{minute}-")  # the fired event's id: the token
    time.sleep(0.6)
    assert len(calls("poll")) == 1  # one-shot
    events.disable_rule(Name="punctual-rule")


def test_state_survives_a_restart(tmp_path, local):
    ddb, table = local.clients["dynamodb"], local.settings.table_name
    ddb.put_item(TableName=table, Item={"pk": {"S": "scheduler"}, "sk": {"S": "9999999999999#x"},
                                        "payload": {"M": {"b": {"B": b"\x00\x01"}}},
                                        "punctual_enqueued_ms": {"N": "5"}})
    ddb.put_item(TableName=table, Item={"pk": {"S": "__punctual__"}, "sk": {"S": "rule"}, "armed_ms": {"N": "0"}})
    local.stop()
    again = LocalStack(LocalOptions(port=free_port(), state_dir=tmp_path, template=local.opts.template,
                                    state_file=tmp_path / "state.json"), out=lambda *_: None).start()
    try:
        items = again.clients["dynamodb"].scan(TableName=table)["Items"]
        assert items == [{"pk": {"S": "scheduler"}, "sk": {"S": "9999999999999#x"},
                          "payload": {"M": {"b": {"B": b"\x00\x01"}}}}]  # send mark and meta row dropped
        assert again.restored == 1
    finally:
        again.stop()
