"""The local stack's stream poller when the function keeps failing on one record: it retries
from the checkpoint, skips that record alone after MaximumRetryAttempts (describing it on the
OnFailure queue) and goes on with the records after it (punctual.lambda_events.stream_after_failure)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

from punctual.local.drivers import StreamDriver
from punctual.local.provision import Mapping, Table

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2027-01-01T00:00:00.000"


class _Streams:
    """A dynamodbstreams client over one shard holding ``records`` (then nothing new)."""

    def __init__(self, records: list[dict[str, Any]]):
        self.records = records

    def describe_stream(self, StreamArn: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        return {"StreamDescription": {"Shards": [{"ShardId": "shard-1"}]}}

    def get_shard_iterator(self, **_: Any) -> dict[str, Any]:
        return {"ShardIterator": "it"}

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:  # noqa: N803
        out, self.records = self.records, []
        return {"Records": out, "NextShardIterator": "it"}


def _record(seq: int) -> dict[str, Any]:
    return {"eventID": str(seq), "eventName": "INSERT",
            "dynamodb": {"Keys": {"pk": {"S": "p"}, "sk": {"S": f"{seq}#t{seq}"}}, "SequenceNumber": str(seq)}}


def test_the_local_stream_poller_skips_only_the_record_that_keeps_failing() -> None:
    batches: list[list[str]] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        seqs = [r["dynamodb"]["SequenceNumber"] for r in event["Records"]]
        batches.append(seqs)
        return {"batchItemFailures": [{"itemIdentifier": "2"}] if "2" in seqs else []}

    fn = SimpleNamespace(name="editor", invoke=invoke, spec=SimpleNamespace(arn="arn:aws:lambda:fn"))
    sent: list[dict[str, Any]] = []
    sqs = SimpleNamespace(send_message=lambda QueueUrl, MessageBody: sent.append(json.loads(MessageBody)))  # noqa: N803
    mapping = Mapping("M", "F", "dynamodb", "T", ARN, batch_size=100, report_batch_item_failures=True,
                      maximum_retry_attempts=2, bisect_on_error=True)
    driver = StreamDriver(mapping, Table("T", "t", "arn:t", stream_arn=ARN), fn, _Streams([_record(i) for i in (1, 2, 3)]),
                          "us-east-1", log=lambda *_: None, idle_s=0.01, sqs=sqs, on_failure_url="q/on-failure")
    driver.start()
    try:
        deadline = time.monotonic() + 10
        while driver.skipped == 0 or not any(b == ["3"] for b in batches):
            assert time.monotonic() < deadline, f"no progress: {batches}"
            time.sleep(0.01)
    finally:
        driver.stop()
        driver.join(5)
    # the whole batch, then 2 retries from the checkpoint, then the record after the skipped one
    assert batches == [["1", "2", "3"], ["2", "3"], ["2", "3"], ["3"]]
    assert driver.skipped == 1
    assert [m["DDBStreamBatchInfo"]["startSequenceNumber"] for m in sent] == ["2"]
    assert sent[0]["requestContext"]["condition"] == "RetryAttemptsExhausted"
