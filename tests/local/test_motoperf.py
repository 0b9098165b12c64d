"""The moto speed-up (punctual/local/motoperf.py) changes no result an SQS client sees."""

from __future__ import annotations

import datetime
import time

import boto3
from freezegun import freeze_time
from moto import mock_aws

from punctual.local import motoperf


def test_counts_retention_and_dedup_unchanged():
    assert motoperf.apply()
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        fifo = sqs.create_queue(QueueName="f.fifo", Attributes={
            "FifoQueue": "true", "ContentBasedDeduplication": "true"})["QueueUrl"]
        sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": f"m{i}", "DelaySeconds": 900 if i < 3 else 0} for i in range(8)])
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=1)["Messages"]
        assert len(got) == 2
        a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert (a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesDelayed"],
                a["ApproximateNumberOfMessagesNotVisible"]) == ("3", "3", "2")
        time.sleep(1.1)  # visibility timeout over: back to visible
        a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert (a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesNotVisible"]) == ("5", "0")
        # content-based deduplication still read on send
        for _ in range(2):
            sqs.send_message(QueueUrl=fifo, MessageBody="same", MessageGroupId="g")
        assert len(sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10)["Messages"]) == 1
        # retention still applied on receive
        short = sqs.create_queue(QueueName="s", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
        sqs.send_message(QueueUrl=short, MessageBody="x")
        with freeze_time(datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=120)):
            assert sqs.receive_message(QueueUrl=short).get("Messages", []) == []


def test_deletes_unchanged():
    """Current and earlier receipt handles delete; a deleted one deletes again; a made-up one
    is invalid; the other messages stay."""
    import pytest
    from botocore.exceptions import ClientError

    assert motoperf.apply()
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(5)])
        first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=0)["Messages"]
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30)["Messages"]
        assert len(again) == 5
        old = first[0]  # an earlier handle of a message received twice
        sqs.delete_message(QueueUrl=url, ReceiptHandle=old["ReceiptHandle"])
        sqs.delete_message(QueueUrl=url, ReceiptHandle=old["ReceiptHandle"])  # again: fine
        current = next(m for m in again if m["MessageId"] == first[1]["MessageId"])
        out = sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": "a", "ReceiptHandle": current["ReceiptHandle"]},
            {"Id": "b", "ReceiptHandle": "not-a-handle"}])
        assert [x["Id"] for x in out["Successful"]] == ["a"]
        assert [(x["Id"], x["Code"]) for x in out["Failed"]] == [("b", "ReceiptHandleIsInvalid")]
        with pytest.raises(ClientError, match="ReceiptHandleIsInvalid"):
            sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-handle")
        a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"]) == 3
        left = {m["MessageId"] for m in again} - {old["MessageId"], current["MessageId"]}
        sqs.change_message_visibility_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
            for i, m in enumerate(again) if m["MessageId"] in left])
        assert {m["MessageId"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]} == left
