"""One sender per row (invariant 5, docs/architecture.md "Claim, then send"): whoever sends a row
claims it first with a conditional write on what it read; of two senders that read the same row
(the editor and a poll, two overlapping polls), only one claims it. Over moto."""

from __future__ import annotations

from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS, task_from_item
from punctual.core.store import claim
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
