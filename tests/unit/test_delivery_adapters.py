"""Adapters the consumer relies on: size-aware send batches, range reads and batched deletes."""

from __future__ import annotations

from botocore.exceptions import ClientError

from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS, RowSend
from punctual.core.queues import MAX_BATCH_BYTES, Outgoing, batches, send_all
from punctual.core.retry import ATTEMPTS
from punctual.core.store import SAME_SEND, delete_sent, rows_between


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
    """Conditional DeleteItems (SAME_SEND: the row's attempt and send mark), throttled for the first
    ``throttled`` calls; and a Query that pages."""

    def __init__(self, rows, throttled=0):
        self.rows, self.throttled, self.calls = dict(rows), throttled, []

    def delete_item(self, TableName, Key, ConditionExpression, ExpressionAttributeValues, **_):  # noqa: N803
        """A single conditional Delete, recorded by its sk."""
        self.calls.append(Key["sk"]["S"])
        if self.throttled > 0:
            self.throttled -= 1
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "DeleteItem")
        assert ConditionExpression == SAME_SEND
        key = (Key["pk"]["S"], Key["sk"]["S"])
        row, want = self.rows.get(key), ExpressionAttributeValues
        if not (row is not None and row.get(ATTR_ATTEMPT) == want[":att"] and ATTR_ENQUEUED_MS in row
                and int(row[ATTR_ENQUEUED_MS]["N"]) <= int(want[":enq"]["N"])):
            raise ClientError({"Error": {"Code": "ConditionalCheckFailedException"}}, "DeleteItem")
        del self.rows[key]
        return {}

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


def row(sk, attempt=None, enqueued_ms=None):
    item = {"pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": {"M": {}}}
    if attempt is not None:
        item[ATTR_ATTEMPT] = {"N": str(attempt)}
    if enqueued_ms is not None:
        item[ATTR_ENQUEUED_MS] = {"N": str(enqueued_ms)}
    return item


def sent(sk, attempt=1, enqueued_ms=1_000):
    return RowSend("scheduler", sk, attempt, enqueued_ms)


def test_delete_sent_deletes_each_row_with_its_own_conditional_delete_retrying_throttled_calls():
    """1 write unit a row (a transaction's delete costs 2); a throttled call is made again."""
    rows = {("scheduler", f"k{i:03}"): row(f"k{i:03}", 1, 1_000) for i in range(150)}
    ddb, clock = FakeDdb(rows, throttled=1), ManualClock()
    assert delete_sent(ddb, Settings(send_workers=1), clock, [sent(sk) for _, sk in rows]) == ([], [], [])
    assert ddb.rows == {}
    assert ddb.calls == ["k000", *(f"k{i:03}" for i in range(150))]  # the throttled first one asked again
    assert clock.slept_ms > 0  # backed off


def test_delete_sent_leaves_the_rows_written_over_and_deletes_the_others():
    """Left: a put over the key (no send mark: a new task), a newer send (an orphan resend: another
    attempt), a new task claimed since (a later send mark); deleted: a row whose orphan clock was
    restarted (an earlier or equal mark). A row named twice is deleted once."""
    rows = {("scheduler", "new"): row("new"), ("scheduler", "resent"): row("resent", 2, 900),
            ("scheduler", "claimed"): row("claimed", 1, 1_001), ("scheduler", "same"): row("same", 1, 1_000),
            ("scheduler", "restarted"): row("restarted", 1, 400)}
    ddb = FakeDdb(rows)
    over, left, _ = delete_sent(ddb, Settings(), ManualClock(), [*(sent(sk) for _, sk in rows), sent("same")])
    assert sorted(r.sk for r in over) == ["claimed", "new", "resent"] and left == []
    assert sorted(sk for _, sk in ddb.rows) == ["claimed", "new", "resent"]
    assert sorted(ddb.calls) == ["claimed", "new", "resent", "restarted", "same"]


def test_delete_sent_returns_the_rows_left_undeleted_when_the_table_fails():
    """The first row's delete fails for good (its retries spent): the others are not tried."""
    rows = {("scheduler", "a"): row("a", 1, 1_000), ("scheduler", "b"): row("b", 1, 1_000)}
    ddb = FakeDdb(rows, throttled=100)
    over, left, _ = delete_sent(ddb, Settings(send_workers=1), ManualClock(), [sent("a"), sent("b"), sent("a")])
    assert over == [] and sorted(r.sk for r in left) == ["a", "b"] and len(ddb.rows) == 2
    assert ddb.calls == ["a"] * ATTEMPTS
    assert delete_sent(FakeDdb({}), Settings(), ManualClock(), []) == ([], [], [])


def test_delete_sent_stops_before_the_invocations_deadline_and_leaves_the_rest():
    """Deletes are not started within DELETE_RESERVE_MS of the deadline: the rows left go to a
    delete-only copy of their pointer (the caller) instead of an invocation timing out mid-batch."""
    from punctual.core.retry import set_deadline
    from punctual.core.store import DELETE_RESERVE_MS

    rows = {("scheduler", k): row(k, 1, 1_000) for k in ("a", "b", "c")}
    ddb, clock = FakeDdb(rows), ManualClock()
    set_deadline(clock.now_ms() + DELETE_RESERVE_MS + 5)
    try:
        real = ddb.delete_item

        def slow(**kw):
            clock.advance_ms(3)
            return real(**kw)

        ddb.delete_item = slow
        over, left, untried = delete_sent(ddb, Settings(send_workers=1), clock, [sent("a"), sent("b"), sent("c")])
    finally:
        set_deadline(None)
    assert over == untried == [] and [r.sk for r in left] == ["c"] and ddb.calls == ["a", "b"]
    assert list(ddb.rows) == [("scheduler", "c")]


def test_deletes_in_a_wait_start_none_after_the_time_given_and_hand_back_the_rest():
    """The consumer deletes while it waits for its next run, up to that run's due time: the rows
    not tried then are handed back untried (deleted later in the invocation), not failed."""
    rows = {("scheduler", k): row(k, 1, 1_000) for k in ("a", "b", "c", "d")}
    ddb, clock = FakeDdb(rows), ManualClock()
    real = ddb.delete_item

    def slow(**kw):
        clock.advance_ms(3)
        return real(**kw)

    ddb.delete_item = slow
    over, left, untried = delete_sent(ddb, Settings(send_workers=1), clock, [sent(k) for k in "abcd"], until_ms=5)
    assert over == left == [] and [r.sk for r in untried] == ["c", "d"] and ddb.calls == ["a", "b"]
    assert sorted(sk for _, sk in ddb.rows) == ["c", "d"]


def test_rows_between_reads_the_inclusive_range_across_pages():
    rows = {("scheduler", k): row(k) for k in ("a", "b", "c", "d", "e", "f")}
    found = rows_between(FakeDdb(rows), Settings(), ManualClock(), "b", "e", pk="scheduler")
    assert sorted(found) == ["b", "c", "d", "e"]
    assert found["c"] == row("c")
