"""One sender per row (invariant 5, docs/architecture.md "Claim, then send"): whoever sends a row
claims it first with a conditional write on what it read; of two senders that read the same row
(the editor and a poll, two overlapping polls), only one claims it. Over moto."""

from __future__ import annotations

from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS, task_from_item
from punctual.core.store import claim
from punctual.core.usecases import send
from tests.faults import Faults
from tests.functional.helpers import sk
from tests.support import T0_MS


def _read(stack, key: str):
    (item,) = [r for r in stack.rows() if r["sk"]["S"] == key]
    return task_from_item(item, stack.settings.partitions)


def test_two_senders_of_a_new_row_claim_it_once(stack, frozen):
    """Mutant: the claim of a new row without ``attribute_not_exists`` on the send mark: both
    claims pass and the row is sent twice."""
    key = sk(T0_MS + 5_000, "a")
    stack.put_raw(key, {"x": "1"})
    editor_read, poll_read = _read(stack, key), _read(stack, key)
    s, clock = stack.settings, stack.deps.clock
    assert claim(stack.ddb, s, clock, editor_read, T0_MS, "stream:1") == 1
    assert claim(stack.ddb, s, clock, poll_read, T0_MS + 1, "poll-event") is None
    row = _read(stack, key)
    assert (row.enqueued_ms, row.attempt, row.claim_token) == (T0_MS, 1, "stream:1")


def test_two_senders_of_an_orphan_claim_it_once(stack, frozen):
    """Mutant: the claim of a sent row without its send mark in the condition (``#e = :prev``):
    two polls that both took it for an orphan would both resend it."""
    key = sk(T0_MS - 600_000, "o")
    stack.put_raw(key, {"x": "1"}, **{ATTR_ENQUEUED_MS: {"N": str(T0_MS - 600_000)}, ATTR_ATTEMPT: {"N": "1"}})
    first, second = _read(stack, key), _read(stack, key)
    s, clock = stack.settings, stack.deps.clock
    assert claim(stack.ddb, s, clock, first, T0_MS, "poll-1") == 2
    assert claim(stack.ddb, s, clock, second, T0_MS + 1, "poll-2") is None
    assert _read(stack, key).attempt == 2


def test_a_cancelled_row_is_never_claimed_back(stack, frozen):
    key = sk(T0_MS + 5_000, "c")
    stack.put_raw(key, {"x": "1"})
    read = _read(stack, key)
    stack.ddb.delete_item(TableName=stack.settings.table_name, Key={"pk": {"S": "scheduler"}, "sk": {"S": key}})
    assert claim(stack.ddb, stack.settings, stack.deps.clock, read, T0_MS) is None
    assert stack.rows() == []


def _due_rows(stack, n: int) -> list:
    for i in range(n):
        stack.put_raw(sk(T0_MS + 60_000 + i, f"r{i}"), {"x": "1"})
    return sorted((task_from_item(item, stack.settings.partitions) for item in stack.rows()), key=lambda t: t.sk)


def test_many_rows_are_sent_chunk_by_chunk_while_the_rest_are_claimed(stack, frozen, monkeypatch):
    """A poll with many rows sends the earliest before it claims the rest (send.SEND_CHUNK_ROWS):
    with 3 a chunk, 7 rows go claim x3, send, claim x3, send, claim, send. Mutant: claim all,
    then send: the first send comes after the seventh claim."""
    monkeypatch.setattr(send, "SEND_CHUNK_ROWS", 3)
    calls: list[str] = []
    stack.ddb.meta.events.register("after-call.dynamodb.UpdateItem", lambda **_: calls.append("claim"))
    stack.sqs.meta.events.register("after-call.sqs.SendMessageBatch", lambda **_: calls.append("send"))
    tasks = _due_rows(stack, 7)
    report = send.claim_and_send(stack.ddb, stack.sqs, stack.settings, stack.deps.clock, tasks, token="poll-1")
    assert calls == ["claim"] * 3 + ["send"] + ["claim"] * 3 + ["send", "claim", "send"]
    assert [t.sk for t in report.sent] == [t.sk for t in tasks] and report.failed == []


def test_once_the_table_refuses_a_claim_the_later_chunks_are_not_tried(stack, frozen, monkeypatch):
    """The table failing from the 5th claim on: the rows claimed are sent (chunk 1, and the 4th row of
    chunk 2), the rest are failed (left to a poll the caller arms), and the third chunk is not tried."""
    monkeypatch.setattr(send, "SEND_CHUNK_ROWS", 3)
    tasks = _due_rows(stack, 7)
    faults = Faults(stack.ddb).fail("UpdateItem", code="InternalServerError", times=100, first=5)
    report = send.claim_and_send(stack.ddb, stack.sqs, stack.settings, stack.deps.clock, tasks, token="poll-1")
    assert [t.sk for t in report.sent] == [t.sk for t in tasks[:4]]
    assert sorted(t.sk for t in report.failed) == [t.sk for t in tasks[4:]]
    assert faults.count("UpdateItem") == 4  # the 5th failed (not counted): none after it
