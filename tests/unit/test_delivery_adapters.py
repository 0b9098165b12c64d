"""Adapters the consumer relies on: size-aware send batches and batched consistent reads."""

from __future__ import annotations

import pytest

from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.queues import MAX_BATCH_BYTES, Outgoing, batches, send_all
from punctual.core.store import get_rows


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
    """BatchGetItem that leaves some keys unprocessed on the first calls."""

    def __init__(self, rows, unprocessed_rounds=1):
        self.rows, self.rounds, self.calls = rows, unprocessed_rounds, []

    def batch_get_item(self, RequestItems):  # noqa: N803
        [(table, req)] = RequestItems.items()
        assert req["ConsistentRead"] is True and len(req["Keys"]) <= 100
        keys = req["Keys"]
        self.calls.append(len(keys))
        held = keys[len(keys) // 2 :] if self.rounds > 0 else []
        self.rounds -= 1
        served = [k for k in keys if k not in held]
        items = [self.rows[(k["pk"]["S"], k["sk"]["S"])] for k in served if (k["pk"]["S"], k["sk"]["S"]) in self.rows]
        resp = {"Responses": {table: items}}
        if held:
            resp["UnprocessedKeys"] = {table: {"Keys": held, "ConsistentRead": True}}
        return resp


def row(sk):
    return {"pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": {"M": {}}}


def test_get_rows_retries_unprocessed_keys_and_dedupes():
    rows = {("scheduler", f"k{i}"): row(f"k{i}") for i in range(0, 150, 2)}
    ddb, clock = FakeDdb(rows), ManualClock()
    keys = [("scheduler", f"k{i}") for i in range(150)] + [("scheduler", "k0")]
    found = get_rows(ddb, Settings(), clock, keys)
    assert set(found) == set(rows)
    assert ddb.calls[0] == 100 and sum(ddb.calls) > 150  # unprocessed keys asked again
    assert clock.slept_ms > 0  # backed off


def test_get_rows_gives_up_when_keys_stay_unprocessed():
    ddb = FakeDdb({}, unprocessed_rounds=100)
    with pytest.raises(RuntimeError, match="unprocessed"):
        get_rows(ddb, Settings(), ManualClock(), [("scheduler", "a"), ("scheduler", "b")], attempts=3)


def test_get_rows_empty():
    assert get_rows(FakeDdb({}), Settings(), ManualClock(), []) == {}
