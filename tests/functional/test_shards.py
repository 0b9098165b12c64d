"""shards = 4 against moto: rows spread over five partitions (the bare value and four shards) are
polled together, grouped per partition, delivered, cancelled and found by the client
(docs/architecture.md, "Shards")."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from punctual import AlreadyDelivered, NotFound, PunctualClient
from punctual.core.config import Settings
from punctual.core.keys import encode_sk
from punctual.core.models import ATTR_ENQUEUED_MS
from punctual.core.usecases.poll import poll
from tests.consumer_support import delivered, receive_event, run_consumer
from tests.functional.helpers import SentLog
from tests.support import T0_MS, pointers_of

SHARDS = 4
PARTITIONS = ("scheduler", "scheduler#0", "scheduler#1", "scheduler#2", "scheduler#3")


@pytest.fixture
def sharded(frozen):
    from moto import mock_aws

    from tests.support import FreezegunClock, make_stack

    with mock_aws():
        yield make_stack(Settings(shards=SHARDS), clock=FreezegunClock(frozen))


@pytest.fixture
def client(sharded):
    return PunctualClient(sharded.settings.table_name, shards=SHARDS, ddb=sharded.ddb, clock=sharded.deps.clock)


def _pks(stack) -> Counter:
    return Counter(row["pk"]["S"] for row in stack.rows())


def test_the_poller_reads_every_shard_and_the_bare_partition_and_groups_never_mix_them(sharded, frozen):
    # 40 tasks in 4 due instants 2 s apart (each instant spans every shard), one legacy row under
    # the bare value (written before the table was sharded), one due beyond the window
    dues = {f"t{i}": T0_MS + 5_000 + 2_000 * (i % 4) for i in range(40)}
    for task_id, due in dues.items():
        sharded.put_raw(encode_sk(due, task_id), {"n": task_id})
    legacy = encode_sk(T0_MS + 5_000, "legacy")
    sharded.ddb.put_item(TableName=sharded.settings.table_name,
                         Item={"pk": {"S": "scheduler"}, "sk": {"S": legacy}, "payload": {"M": {}}})
    beyond = encode_sk(T0_MS + 20 * 60_000, "beyond")
    sharded.put_raw(beyond, {"n": "beyond"})
    assert set(_pks(sharded)) == set(PARTITIONS)

    log = SentLog(sharded.sqs)
    report = poll(sharded.deps)
    assert report.sent == 41
    bodies = [json.loads(e["MessageBody"]) for e in log.entries]
    pointers = [p for b in bodies for p in pointers_of(b)]
    assert sorted(p["sk"] for p in pointers) == sorted([*(encode_sk(d, t) for t, d in dues.items()), legacy])
    for p in pointers:  # each pointer names the row's own partition (a message holds one partition's rows)
        assert p["pk"] == sharded.settings.partition_for_key(p["sk"]) or p["sk"] == legacy
    # rows due together share messages, per partition: 5 partitions x 4 instants at most, not 41
    assert len(bodies) <= 20
    claimed = {row["sk"]["S"] for row in sharded.rows() if ATTR_ENQUEUED_MS in row}
    assert beyond not in claimed and len(claimed) == 41


def test_sharded_tasks_are_delivered_once_never_early(sharded, frozen, client):
    tasks = [client.schedule(T0_MS + 2_000 + 97 * i, {"i": i}, id=f"job-{i}") for i in range(24)]
    assert len(_pks(sharded)) == SHARDS  # the client wrote every task to its id's shard
    poll(sharded.deps)
    got = []
    for _ in range(8):
        event = receive_event(sharded)
        while event["Records"]:
            assert run_consumer(sharded, event) == {"batchItemFailures": []}
            got += delivered(sharded)
            event = receive_event(sharded)
        frozen.tick(1.0)
    assert sorted(e["id"] for e in got) == sorted(t.id for t in tasks)
    assert all(e["delivered_at_ms"] >= e["due_ms"] for e in got)
    assert sharded.rows() == []


def test_the_client_schedules_to_the_ids_shard_and_finds_cancels_and_counts_across_shards(sharded, client):
    due = T0_MS + 3_600_000
    a = client.schedule(due, {"k": "a"}, id="order-42")
    b = client.schedule(due + 1, {"k": "b"}, id="order-7")
    (row_a,) = [r for r in sharded.rows() if r["sk"]["S"] == a.key]
    assert row_a["pk"]["S"] == "scheduler#2"  # crc32(b"order-42") % 4, the README's rule
    assert client.get(a.key).payload == {"k": "a"}
    assert [t.key for t in client.find("order-7")] == [b.key]
    assert client.count() == 2
    assert [t.key for t in client.list()] == [a.key, b.key]  # merged by due across shards
    moved = client.reschedule(b.key, due - 1)
    assert [t.key for t in client.list()] == [moved.key, a.key]
    assert client.cancel(a.key).id == "order-42"
    with pytest.raises(NotFound):
        client.get(a.key)
    assert client.count() == 1


def test_the_client_still_reaches_rows_written_before_the_table_was_sharded(sharded, client):
    old = encode_sk(T0_MS + 60_000, "old-row")
    sharded.ddb.put_item(TableName=sharded.settings.table_name,
                         Item={"pk": {"S": "scheduler"}, "sk": {"S": old}, "payload": {"M": {"v": {"N": "1"}}}})
    assert client.get(old).payload == {"v": 1}
    assert [t.key for t in client.find("old-row")] == [old]
    assert client.count() == 1
    assert client.cancel(old).key == old
    with pytest.raises(NotFound):
        client.cancel(old)
    past = encode_sk(T0_MS - 1, "gone")
    with pytest.raises(AlreadyDelivered):
        client.cancel(past)
