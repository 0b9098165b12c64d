"""PunctualClient against moto, in virtual time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from punctual import (
    AlreadyDelivered,
    AlreadyExists,
    InvalidSchedule,
    NotFound,
    PartialWrite,
    PunctualClient,
    ScheduledTask,
)
from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS, MAX_PAYLOAD_BYTES
from tests.faults import Faults
from tests.support import T0_MS

T0 = datetime.fromtimestamp(T0_MS / 1000, tz=UTC)


@pytest.fixture
def client(stack):
    return PunctualClient(stack.settings.table_name, stack.settings.partition_key_value,
                          ddb=stack.ddb, clock=stack.deps.clock)


class NoCalls:
    """A DynamoDB client that must not be called: validation happens before any write."""

    def __getattr__(self, name):
        raise AssertionError(f"unexpected DynamoDB call {name}")


@pytest.fixture
def offline():
    from punctual.core.clock import ManualClock

    return PunctualClient("punctual", ddb=NoCalls(), clock=ManualClock(T0_MS))


def raw_rows(stack):
    return {r["sk"]["S"]: r for r in stack.rows()}


def test_schedule_with_aware_datetime_writes_exactly_the_documented_row(stack, client):
    at = datetime(2027, 1, 1, 1, 0, 0, 123000, tzinfo=timezone(timedelta(hours=1)))  # = T0 + 123 ms
    task = client.schedule(at, {"order": 42, "tags": ["a", "b"], "ok": True, "none": None, "f": 1.5})
    assert task.due_ms == T0_MS + 123 and len(task.id) == 32
    assert task.key == f"{T0_MS + 123:013d}#{task.id}"
    assert task.due == datetime(2027, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)
    assert task.due_iso == "2027-01-01T00:00:00.123Z"
    (row,) = stack.rows()
    assert row == {
        "pk": {"S": "scheduler"},
        "sk": {"S": task.key},
        "payload": {"M": {"order": {"N": "42"}, "tags": {"L": [{"S": "a"}, {"S": "b"}]}, "ok": {"BOOL": True},
                          "none": {"NULL": True}, "f": {"N": "1.5"}}},
    }


def test_schedule_with_epoch_ms_and_explicit_id(stack, client):
    task = client.schedule(T0_MS + 5000, {"a": "b"}, id="order-42")
    assert task.key == f"{T0_MS + 5000:013d}#order-42" and task.id == "order-42"
    assert client.schedule(float(T0_MS + 6000), {}).due_ms == T0_MS + 6000  # integral floats are fine
    assert client.get(task.key) == task


@pytest.mark.parametrize(
    "at, code",
    [
        (datetime(2027, 1, 1, 0, 0, 5), "naive_datetime"),
        (True, "bad_time"),
        (None, "bad_time"),
        ("2027-01-01T00:00:05Z", "bad_time"),
        (float(T0_MS) + 0.5, "bad_time"),
        (float("nan"), "bad_time"),
        (float("inf"), "bad_time"),
        (1_798_761_605, "seconds_not_ms"),
        (datetime(2200, 1, 1, tzinfo=UTC), "year_out_of_range"),
        (7_258_118_400_000, "year_out_of_range"),
        (-5, "negative"),
        (datetime(1969, 12, 31, tzinfo=UTC), "negative"),
    ],
)
def test_bad_times_are_rejected_and_nothing_is_written(offline, at, code):
    with pytest.raises(InvalidSchedule) as err:
        offline.schedule(at, {"a": 1})
    assert err.value.code == code


@pytest.mark.parametrize(
    "payload",
    [
        ["a", "list"],
        "a string",
        None,
        {1: "non-string key"},
        {"s": {1, 2}},
        {"o": object()},
        {"nan": float("nan")},
        {"inf": Decimal("Infinity")},
        {"big": "x" * (MAX_PAYLOAD_BYTES + 1)},
    ],
)
def test_bad_payloads_are_rejected(offline, payload):
    with pytest.raises(InvalidSchedule):
        offline.schedule(T0_MS + 5000, payload)


@pytest.mark.parametrize("bad_id", ["", "a\x00b", "tab\there", "x" * 600])
def test_bad_ids_are_rejected(offline, bad_id):
    with pytest.raises(InvalidSchedule):
        offline.schedule(T0_MS + 5000, {}, id=bad_id)


def test_same_id_same_ms_is_an_error_not_an_overwrite(stack, client):
    client.schedule(T0_MS + 5000, {"v": 1}, id="dup")
    with pytest.raises(AlreadyExists):
        client.schedule(T0_MS + 5000, {"v": 2}, id="dup")
    (row,) = stack.rows()
    assert row["payload"] == {"M": {"v": {"N": "1"}}}
    # the identical task again (a retry whose first response was lost) is not an error
    assert client.schedule(T0_MS + 5000, {"v": 1}, id="dup").key == row["sk"]["S"]
    assert len(stack.rows()) == 1


def test_schedule_retry_after_lost_response_is_idempotent(stack, client):
    calls = {"n": 0}
    real = stack.ddb.put_item

    def put_twice(**kw):
        calls["n"] += 1
        real(**kw)  # the write lands...
        if calls["n"] == 1:
            from botocore.exceptions import ClientError
            raise ClientError({"Error": {"Code": "InternalError", "Message": "response lost"}}, "PutItem")

    stack.ddb.put_item = put_twice
    try:
        task = client.schedule(T0_MS + 5000, {"v": 1}, id="retry")
    finally:
        stack.ddb.put_item = real
    assert calls["n"] == 2 and client.get(task.key).payload == {"v": 1}


class Unprocessing:
    """A DynamoDB client whose BatchWriteItem leaves some items unprocessed at first."""

    def __init__(self, real, leave: int, rounds: int):
        self.real, self.leave, self.rounds, self.calls = real, leave, rounds, []

    def __getattr__(self, name):
        return getattr(self.real, name)

    def batch_write_item(self, RequestItems):
        (table, reqs), = RequestItems.items()
        self.calls.append(len(reqs))
        if self.rounds > 0:
            self.rounds -= 1
            done, rest = reqs[: max(0, len(reqs) - self.leave)], reqs[max(0, len(reqs) - self.leave):]
            if done:
                self.real.batch_write_item(RequestItems={table: done})
            return {"UnprocessedItems": {table: rest}}
        return self.real.batch_write_item(RequestItems=RequestItems)


def test_schedule_many_writes_all_despite_unprocessed_items(stack):
    fake = Unprocessing(stack.ddb, leave=7, rounds=4)
    client = PunctualClient(stack.settings.table_name, ddb=fake, clock=stack.deps.clock)
    items = [(T0_MS + 1000 * i, {"i": i}) for i in range(60)]
    items.append({"at": T0 + timedelta(days=1), "payload": {"i": "dict"}, "id": "d"})
    tasks = client.schedule_many(items)
    assert len(tasks) == 61 and all(n <= 25 for n in fake.calls)
    assert len(fake.calls) > 3  # 3 chunks + retries of unprocessed items
    rows = raw_rows(stack)
    assert set(rows) == {t.key for t in tasks}
    assert rows[tasks[7].key]["payload"] == {"M": {"i": {"N": "7"}}}


def test_schedule_many_validates_everything_before_writing(stack, client):
    items = [(T0_MS + 1000 * i, {"i": i}) for i in range(30)]
    items[27] = (datetime(2027, 1, 1), {"naive": True})
    with pytest.raises(InvalidSchedule, match="item 27"):
        client.schedule_many(items)
    with pytest.raises(InvalidSchedule):
        client.schedule_many([(T0_MS + 5, {}, "same"), (T0_MS + 5, {}, "same")])
    with pytest.raises(InvalidSchedule):
        client.schedule_many([[T0_MS, {}]])
    assert stack.rows() == []


def test_schedule_many_gives_up_with_partial_write(stack):
    fake = Unprocessing(stack.ddb, leave=2, rounds=100)
    client = PunctualClient(stack.settings.table_name, ddb=fake, clock=stack.deps.clock)
    with pytest.raises(PartialWrite) as err:
        client.schedule_many([(T0_MS + i, {}) for i in range(5)], max_attempts=3)
    assert len(err.value.unwritten) == 2 and len(err.value.written) == 3
    assert len(stack.rows()) == 3


def test_get_missing_is_not_found_or_already_delivered(stack, client):
    with pytest.raises(NotFound) as nf:
        client.get(f"{T0_MS + 5000:013d}#nope")
    assert not isinstance(nf.value, AlreadyDelivered)
    with pytest.raises(AlreadyDelivered):
        client.get(f"{T0_MS - 5000:013d}#gone")
    with pytest.raises(InvalidSchedule):
        client.get("not-a-key")


def test_get_reports_in_flight_state(stack, client):
    task = client.schedule(T0_MS + 5000, {"a": 1})
    stack.ddb.update_item(TableName=stack.settings.table_name, Key={"pk": {"S": "scheduler"}, "sk": {"S": task.key}},
                          UpdateExpression="SET #e = :n, #a = :one",
                          ExpressionAttributeNames={"#e": ATTR_ENQUEUED_MS, "#a": ATTR_ATTEMPT},
                          ExpressionAttributeValues={":n": {"N": str(T0_MS)}, ":one": {"N": "1"}})
    got = client.get(task)
    assert got.in_flight and got.enqueued_ms == T0_MS and got.attempt == 1 and got.payload == {"a": 1}


def test_list_is_paginated_in_due_order_and_skips_non_tasks(stack, client):
    import random

    dues = [T0_MS + 1000 * i for i in range(23)]
    shuffled = dues[:]
    random.Random(7).shuffle(shuffled)
    for n, due in enumerate(shuffled):
        client.schedule(due, {"n": n}, id=f"id{n}")
    stack.put_raw(f"{T0_MS + 2500:013d}", {"bad": "row"})  # malformed, awaiting rejection
    stack.ddb.put_item(TableName=stack.settings.table_name,  # the meta partition is never listed
                       Item={"pk": {"S": "__punctual__"}, "sk": {"S": "rule"}, "version": {"N": "1"}})
    faults = Faults(stack.ddb)
    listed = list(client.list(page_size=5))
    assert [t.due_ms for t in listed] == dues
    assert faults.count("Query") >= 5  # > 1 page
    assert all(isinstance(t, ScheduledTask) for t in listed)

    window = list(client.list(start=T0_MS + 3000, end=T0 + timedelta(seconds=7), page_size=2))
    assert [t.due_ms for t in window] == [T0_MS + 3000 + 1000 * i for i in range(4)]  # start <= due < end
    assert [t.due_ms for t in client.list(limit=3, page_size=2)] == dues[:3]
    assert list(client.list(limit=0)) == []
    assert len(list(client.list(start=0, end=datetime(2199, 12, 31, tzinfo=UTC)))) == 23
    with pytest.raises(InvalidSchedule):
        list(client.list(start=datetime(2027, 1, 1)))


def test_find_by_id_returns_every_pending_task_with_that_id(stack, client):
    client.schedule(T0_MS + 9000, {"n": 2}, id="order-7")
    client.schedule(T0_MS + 1000, {"n": 1}, id="order-7")
    client.schedule(T0_MS + 5000, {"n": 3}, id="x-order-7")  # the id must match whole, not as a suffix
    client.schedule(T0_MS + 6000, {"n": 4}, id="order-77")
    stack.put_raw(f"{(T0_MS + 2000) // 1000}#order-7", {"bad": "row"})  # not a task (seconds, not ms): skipped
    for n in range(12):
        client.schedule(T0_MS + 100 * n, {}, id=f"other-{n}")
    faults = Faults(stack.ddb)
    found = client.find("order-7")
    assert [(t.due_ms, t.payload) for t in found] == [(T0_MS + 1000, {"n": 1}), (T0_MS + 9000, {"n": 2})]
    assert faults.count("Query") == 1
    assert client.find("nobody") == [] and client.find("no such id!") == []


def test_count_counts_rows_and_in_flight_ones_without_reading_them(stack, client):
    assert client.count() == 0 and client.count(in_flight=True) == 0
    tasks = [client.schedule(T0_MS + 1000 * i, {"i": i}) for i in range(7)]
    stack.put_raw(f"{T0_MS + 2500:013d}", {"bad": "row"})  # malformed rows are rows too
    stack.ddb.update_item(TableName=stack.settings.table_name, Key={"pk": {"S": "scheduler"}, "sk": {"S": tasks[0].key}},
                          UpdateExpression="SET #e = :n", ExpressionAttributeNames={"#e": ATTR_ENQUEUED_MS},
                          ExpressionAttributeValues={":n": {"N": str(T0_MS)}})
    faults = Faults(stack.ddb)
    assert client.count() == 8 and client.count(in_flight=True) == 1
    assert faults.count("Query") == 2


def test_find_and_count_read_every_page():
    from punctual.core.clock import ManualClock

    class TwoPages:
        def __init__(self):
            self.requests = []

        def query(self, **kw):
            self.requests.append(kw)
            item = {"pk": {"S": "scheduler"}, "sk": {"S": f"{T0_MS + len(self.requests):013d}#a"}, "payload": {"M": {}}}
            more = {"LastEvaluatedKey": {"pk": item["pk"], "sk": item["sk"]}} if len(self.requests) % 2 else {}
            return {"Items": [item], "Count": 3, **more}

    ddb = TwoPages()
    client = PunctualClient("punctual", ddb=ddb, clock=ManualClock(T0_MS))
    assert [t.due_ms for t in client.find("a")] == [T0_MS + 1, T0_MS + 2]
    assert client.count() == 6
    assert [r.get("ExclusiveStartKey", {}).get("sk") for r in ddb.requests] == [
        None, {"S": f"{T0_MS + 1:013d}#a"}, None, {"S": f"{T0_MS + 3:013d}#a"}]


def test_cancel(stack, client):
    task = client.schedule(T0_MS + 60_000, {"a": 1})
    cancelled = client.cancel(task.key)
    assert cancelled.key == task.key and cancelled.payload == {"a": 1}
    assert stack.rows() == []
    with pytest.raises(NotFound) as err:
        client.cancel(task)
    assert not isinstance(err.value, AlreadyDelivered)
    past = client.schedule(T0_MS + 1000, {"a": 1})
    stack.ddb.delete_item(TableName=stack.settings.table_name,  # the consumer delivered it
                          Key={"pk": {"S": "scheduler"}, "sk": {"S": past.key}})
    stack.deps.clock.frozen.tick(2)
    with pytest.raises(AlreadyDelivered):
        client.cancel(past.key)


def test_reschedule_moves_atomically_and_drops_bookkeeping(stack, client):
    task = client.schedule(T0_MS + 5000, {"a": [1, 2]}, id="mv")
    stack.ddb.update_item(TableName=stack.settings.table_name, Key={"pk": {"S": "scheduler"}, "sk": {"S": task.key}},
                          UpdateExpression="SET #e = :n", ExpressionAttributeNames={"#e": ATTR_ENQUEUED_MS},
                          ExpressionAttributeValues={":n": {"N": str(T0_MS)}})
    moved = client.reschedule(task.key, T0 + timedelta(hours=1))
    assert moved.id == "mv" and moved.payload == {"a": [1, 2]} and moved.due_ms == T0_MS + 3_600_000
    rows = raw_rows(stack)
    assert list(rows) == [moved.key]
    assert rows[moved.key] == {"pk": {"S": "scheduler"}, "sk": {"S": moved.key},
                               "payload": {"M": {"a": {"L": [{"N": "1"}, {"N": "2"}]}}}}
    assert client.reschedule(moved, moved.due_ms) == moved  # same time: nothing to do
    with pytest.raises(NotFound):
        client.reschedule(task.key, T0_MS + 10_000)
    with pytest.raises(InvalidSchedule):
        client.reschedule(moved.key, datetime(2027, 1, 1))


def test_reschedule_onto_an_existing_key_fails_and_keeps_both(stack, client):
    a = client.schedule(T0_MS + 5000, {"v": "a"}, id="x")
    b = client.schedule(T0_MS + 9000, {"v": "b"}, id="x")
    with pytest.raises(AlreadyExists):
        client.reschedule(a, T0_MS + 9000)
    assert set(raw_rows(stack)) == {a.key, b.key}


def test_reschedule_failure_leaves_the_old_row_intact(stack, client):
    task = client.schedule(T0_MS + 5000, {"v": 1}, id="keep")
    faults = Faults(stack.ddb).fail("TransactWriteItems", "ValidationException")
    with pytest.raises(Exception, match="injected"):
        client.reschedule(task.key, T0_MS + 60_000)
    faults.clear()
    assert list(raw_rows(stack)) == [task.key]
    assert client.get(task.key) == task
    # a transient failure is retried
    Faults(stack.ddb).fail("TransactWriteItems", "InternalError", times=2)
    moved = client.reschedule(task.key, T0_MS + 60_000)
    assert list(raw_rows(stack)) == [moved.key]


def test_partition_value_is_validated():
    with pytest.raises(InvalidSchedule):
        PunctualClient("t", "__punctual__", ddb=object())


def test_public_names_from_punctual():
    import punctual

    assert punctual.PunctualClient is PunctualClient and punctual.NotFound is NotFound
