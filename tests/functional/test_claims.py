"""One sender per row (invariant 5, docs/architecture.md "Claim, then send"): whoever sends a row
claims it first with a conditional write on what it read; of two senders that read the same row
(the editor and a poll, two overlapping polls), only one claims it. Over moto."""

from __future__ import annotations

import pytest

from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS, RowSend, send_mark, task_from_item
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
    key = sk(5_000, "a")
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
    key = sk(-600_000, "o")
    stack.put_raw(key, {"x": "1"}, **{ATTR_ENQUEUED_MS: {"N": str(T0_MS - 600_000)}, ATTR_ATTEMPT: {"N": "1"}})
    first, second = _read(stack, key), _read(stack, key)
    s, clock = stack.settings, stack.deps.clock
    assert claim(stack.ddb, s, clock, first, T0_MS, "poll-1") == 2
    assert claim(stack.ddb, s, clock, second, T0_MS + 1, "poll-2") is None
    assert _read(stack, key).attempt == 2


def test_a_cancelled_row_is_never_claimed_back(stack, frozen):
    key = sk(5_000, "c")
    stack.put_raw(key, {"x": "1"})
    read = _read(stack, key)
    stack.ddb.delete_item(TableName=stack.settings.table_name, Key={"pk": {"S": "scheduler"}, "sk": {"S": key}})
    assert claim(stack.ddb, stack.settings, stack.deps.clock, read, T0_MS) is None
    assert stack.rows() == []


def test_a_retry_of_the_work_that_claimed_a_row_takes_over_its_count(stack, frozen):
    """The same work (token) claiming again a row it claimed: an earlier attempt died, most likely
    before sending (docs/architecture.md, "Attempts count sends that reached the queue"). The claim
    keeps the attempt: a crash after the claim, retried, uses none; the pointer the dead attempt may
    have sent no longer holds the row. Mutant: counting it (the faults scenario rejected 2 valid
    rows as undeliverable after a lost message and crash chains)."""
    key = sk(5_000, "r")
    stack.put_raw(key, {"x": "1"})
    s, clock = stack.settings, stack.deps.clock
    unsent = _read(stack, key)
    assert claim(stack.ddb, s, clock, unsent, T0_MS, "work-1") == 1
    # a poll's retry reads the row claimed by its first attempt
    assert claim(stack.ddb, s, clock, _read(stack, key), T0_MS + 60_000, "work-1") == 1
    # the editor's retry reads the record's image: the row unsent (the second write takes over)
    assert claim(stack.ddb, s, clock, unsent, T0_MS + 61_000, "work-1") == 1
    row = _read(stack, key)
    assert (row.attempt, row.enqueued_ms, row.claim_token, row.takeovers) == (1, T0_MS + 61_000, "work-1", 2)
    (item,) = stack.rows()
    assert not RowSend(row.pk, key, 1, T0_MS).holds(send_mark(item))  # the dead attempt's pointer
    assert RowSend(row.pk, key, 1, T0_MS + 61_000).holds(send_mark(item))
    # other work ("poll-2") finding it an orphan later counts a send
    assert claim(stack.ddb, s, clock, _read(stack, key), T0_MS + 400_000, "poll-2") == 2


def test_a_poll_taking_over_a_dead_polls_lease_takes_over_its_claims_counts(stack, frozen):
    """``take_over``: the token of the lease a poll took (arming.ArmState.lease_taken_from). Rows the
    dead poll claimed keep their attempt; a row claimed by live work is not taken (its mark moved)."""
    key = sk(5_000, "d")
    stack.put_raw(key, {"x": "1"})
    s, clock = stack.settings, stack.deps.clock
    assert claim(stack.ddb, s, clock, _read(stack, key), T0_MS, "dead-poll") == 1
    stale = _read(stack, key)
    assert claim(stack.ddb, s, clock, stale, T0_MS + 1, "poll-2", take_over={"dead-poll"}) == 1
    assert claim(stack.ddb, s, clock, stale, T0_MS + 2, "poll-3", take_over={"dead-poll"}) is None
    row = _read(stack, key)
    assert (row.claim_token, row.attempt, row.takeovers) == ("poll-2", 1, 1)


def _due_rows(stack, n: int) -> list:
    for i in range(n):
        stack.put_raw(sk(60_000 + i, f"r{i}"), {"x": "1"})
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


@pytest.mark.parametrize("delivery", ["consumer", "direct"])
def test_no_chunk_is_started_near_the_invocations_deadline(stack, frozen, monkeypatch, delivery):
    """A big cluster could outlast the poll's Lambda timeout, and the retry would send again what the
    timed-out attempt had sent. No chunk is started with less than CHUNK_RESERVE_MS (30 s) left: the
    rest are failed, left to a poll the caller arms. GIVEN 7 rows, chunks of 3, each claim taking 4 s,
    and 40 s left WHEN they are claimed and sent THEN the first chunk goes (12 s: 28 s left), the other
    4 rows are not claimed. Mutant: no reserve check (all 7 sent, past the deadline)."""
    import dataclasses

    from punctual.core.retry import set_deadline

    monkeypatch.setattr(send, "SEND_CHUNK_ROWS", 3)
    s = dataclasses.replace(stack.settings, delivery=delivery)
    stack.ddb.meta.events.register("after-call.dynamodb.UpdateItem", lambda **_: frozen.tick(4))
    tasks = _due_rows(stack, 7)
    set_deadline(stack.deps.clock.now_ms() + 40_000)
    report = send.claim_and_send(stack.ddb, stack.sqs, s, stack.deps.clock, tasks, token="poll-1")
    assert [t.sk for t in report.sent] == [t.sk for t in tasks[:3]]
    assert [t.sk for t in report.failed] == [t.sk for t in tasks[3:]]
    left = {item["sk"]["S"] for item in stack.rows() if "punctual_enqueued_ms" not in item}
    assert left == {t.sk for t in tasks[3:]}  # never claimed: a poll takes them
