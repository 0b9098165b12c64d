"""Adapters the consumer relies on: size-aware send batches, range reads and batched deletes."""

from __future__ import annotations

from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.queues import MAX_BATCH_BYTES, Outgoing, batches, send_all
from punctual.core.retry import ATTEMPTS
from punctual.core.store import delete_rows, rows_between


def out(n, size=10):
    return [Outgoing(ref=i, body="x" * size) for i in range(n)]


def test_batches_by_ten():
    assert [len(b) for b in batches(out(25))] == [10, 10, 5]
    assert batches([]) == []


def test_batches_by_total_size():
    big = MAX_BATCH_BYTES // 2 - 10  # two fit, three do not
    assert [len(b) for b in batches(out(5, big))] == [2, 2, 1]
    # a single message is never split, even alone over the limit (SQS then reports it)
    assert [len(b) for b in batches(out(2, MAX_BATCH_BYTES + 1))] == [1, 1]
    # multi-byte characters count as bytes
    assert [len(b) for b in batches([Outgoing(i, "é" * (MAX_BATCH_BYTES // 4)) for i in range(3)])] == [2, 1]


class FakeSqs:
    def __init__(self):
        self.calls = []

    def send_message_batch(self, QueueUrl, Entries):  # noqa: N803 (boto3 names)
        total = sum(len(e["MessageBody"].encode()) for e in Entries)
        assert len(Entries) <= 10 and total <= MAX_BATCH_BYTES, "BatchRequestTooLong"
        self.calls.append(len(Entries))
        return {"Successful": [{"Id": e["Id"]} for e in Entries]}


def test_send_all_never_exceeds_the_batch_size_limit():
    sqs = FakeSqs()
    assert send_all(sqs, "q", out(10, 100_000), ManualClock()) == []
    assert sqs.calls == [2, 2, 2, 2, 2]


class FakeDdb:
    """BatchWriteItem that leaves half of the deletes unprocessed for the first rounds, and a
    Query that pages."""

    def __init__(self, rows, unprocessed_rounds=1):
        self.rows, self.rounds, self.calls = dict(rows), unprocessed_rounds, []

    def batch_write_item(self, RequestItems):  # noqa: N803
        [(table, reqs)] = RequestItems.items()
        assert len(reqs) <= 25
        self.calls.append(len(reqs))
        held = reqs[len(reqs) // 2 :] if self.rounds > 0 else []
        self.rounds -= 1
        for r in reqs:
            if r not in held:
                key = r["DeleteRequest"]["Key"]
                self.rows.pop((key["pk"]["S"], key["sk"]["S"]), None)
        return {"UnprocessedItems": {table: held} if held else {}}

    def query(self, TableName, KeyConditionExpression, ExpressionAttributeValues, ConsistentRead,  # noqa: N803
              ExclusiveStartKey=None, **_):
        assert ConsistentRead is True and "BETWEEN" in KeyConditionExpression and "Limit" not in _
        lo, hi = ExpressionAttributeValues[":l"]["S"], ExpressionAttributeValues[":u"]["S"]
        keys = sorted(sk for pk, sk in self.rows if lo <= sk <= hi)
        if ExclusiveStartKey:
            keys = [k for k in keys if k > ExclusiveStartKey["sk"]["S"]]
        page = keys[:2]
        resp = {"Items": [self.rows[("scheduler", k)] for k in page]}
        if len(keys) > 2:
            resp["LastEvaluatedKey"] = {"pk": {"S": "scheduler"}, "sk": {"S": page[-1]}}
        return resp


def row(sk):
    return {"pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": {"M": {}}}


def test_delete_rows_by_25_retrying_unprocessed_items():
    rows = {("scheduler", f"k{i:03}"): row(f"k{i:03}") for i in range(60)}
    ddb, clock = FakeDdb(rows), ManualClock()
    left = delete_rows(ddb, Settings(send_workers=1), clock, list(rows))
    assert left == [] and ddb.rows == {}
    assert max(ddb.calls) == 25 and ddb.calls[:2] == [25, 13]  # the unprocessed half asked again
    assert clock.slept_ms > 0  # backed off


def test_delete_rows_returns_the_keys_left_undeleted():
    rows = {("scheduler", "a"): row("a"), ("scheduler", "b"): row("b")}
    ddb = FakeDdb(rows, unprocessed_rounds=100)
    assert delete_rows(ddb, Settings(), ManualClock(), list(rows)) == [("scheduler", "b")]
    assert list(ddb.rows) == [("scheduler", "b")]
    assert len(ddb.calls) == ATTEMPTS  # one retry layer: one request per attempt, not attempts x attempts
    assert delete_rows(FakeDdb({}), Settings(), ManualClock(), []) == []


def test_rows_between_reads_the_inclusive_range_across_pages():
    rows = {("scheduler", k): row(k) for k in ("a", "b", "c", "d", "e", "f")}
    found = rows_between(FakeDdb(rows), Settings(), ManualClock(), "b", "e", pk="scheduler")
    assert sorted(found) == ["b", "c", "d", "e"]
    assert found["c"] == row("c")
