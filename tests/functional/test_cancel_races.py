"""Cancellation never lies (invariant 4, docs/architecture.md "Cancellation never lies"): a user acts
between two AWS calls of the consumer, over moto.

The consumer fences a run's due second (an UpdateItem of one item per partition and second in the
meta partition) after its wait, then reads the run's rows (a consistent Query), sends, and deletes
each row while it is still the send delivered (SAME_SEND). The client's cancel and reschedule are
transactions with a ConditionCheck that the task's second has no fence. So:

- before the fence, the user wins: the cancel or reschedule returns, the old delivery never happens;
- after it, the delivery wins: they answer AlreadyDelivered and change nothing;
- a row written over the key after the read (a raw put: a new task, claimed or not) is never deleted
  by the delivery that read the old one, and is delivered on its own.

The cut-off is the fence of the task's (partition, due second): written at the due ms of the first
task of that second delivered, so a cancel is refused from up to 999 ms before its task's due
(never earlier than the start of its due second); a task alone in its second, up to its due ms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from punctual.core.models import ATTR_ATTEMPT, ATTR_CLAIM, ATTR_ENQUEUED_MS, DelayMessage
from punctual.core.usecases.consume import consume
from punctual.core.usecases.poll import poll
from punctual.errors import AlreadyDelivered
from tests.consumer_support import ack, delivered, enqueue, mark_claimed, receive_event, run_consumer, schedule
from tests.functional.helpers import before_handler_call, user
from tests.support import T0_MS, client

DUE = T0_MS


BOOKKEEPING = (ATTR_ATTEMPT, ATTR_ENQUEUED_MS, ATTR_CLAIM)


def raw_put(stack, sk: str, payload: dict[str, Any]) -> None:
    client("dynamodb").put_item(TableName=stack.settings.table_name, Item={
        "pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": {"M": {k: {"S": v} for k, v in payload.items()}}})


def pending(stack, sk: str) -> None:
    enqueue(stack, sk, DUE, delay_seconds=0)


@pytest.fixture
def task(stack, frozen):
    sk = schedule(stack, DUE, "t1", {"v": "old"})
    pending(stack, sk)
    return sk


def test_a_cancel_before_the_fence_wins_and_nothing_is_delivered(stack, frozen, task):
    seen = before_handler_call(stack, "UpdateItem", lambda: user(stack).cancel(task))
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert "error" not in seen and seen["result"].key == task  # the cancel returned: it won
    assert delivered(stack) == [] and stack.rows() == []


def test_a_cancel_after_the_fence_answers_already_delivered_and_the_task_goes_once(stack, frozen, task):
    """Mutant: the cancel's transaction without the fence's ConditionCheck: the cancel then returns
    while the event goes out (issue 28's lie)."""
    seen = before_handler_call(stack, "SendMessageBatch", lambda: user(stack).cancel(task))
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert isinstance(seen.get("error"), AlreadyDelivered)
    assert [e["key"] for e in delivered(stack)] == [task]
    assert stack.rows() == []


def test_a_put_over_the_key_after_the_fence_is_a_new_task_the_delivery_never_deletes(stack, frozen, task):
    """Cancel (refused), then a raw put of the same key with a new payload, between the read and the
    send: the old payload is delivered (its delivery had won), and the new row stays, untouched, to
    be delivered on its own (issue 28: the unconditional delete removed it, silently). Mutant: an
    unconditional delete."""
    def cancel_and_put() -> None:
        with pytest.raises(AlreadyDelivered):
            user(stack).cancel(task)
        raw_put(stack, task, {"v": "new"})

    seen = before_handler_call(stack, "SendMessageBatch", cancel_and_put)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert seen["ran"] and "error" not in seen
    assert [e["payload"] for e in delivered(stack)] == [{"v": "old"}]
    (row,) = stack.rows()
    assert row["payload"] == {"M": {"v": {"S": "new"}}} and not set(BOOKKEEPING) & set(row)
    # a new task: a poll sends it and it is delivered once, with its own payload
    assert poll(stack.deps).sent == 1
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert [e["payload"] for e in delivered(stack)] == [{"v": "new"}] and stack.rows() == []


def test_a_cancel_right_after_the_read_answers_already_delivered(stack, frozen, task):
    """The user acts right after the consumer's read of the row (its Query): the fence came before
    the read, so the cancel is refused and the task goes once. Mutant: the read before the fence (a
    cancel between them returns, and the row already read goes out: a cancel that lied)."""
    seen = before_handler_call(stack, "Query", lambda: user(stack).cancel(task), when="after")
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert seen["ran"] and isinstance(seen.get("error"), AlreadyDelivered), seen
    assert [e["key"] for e in delivered(stack)] == [task] and stack.rows() == []


def test_a_put_over_the_key_claimed_after_the_read_is_never_deleted_and_goes_once(stack, frozen, task):
    """After the read, a raw put over the key (a new task) is claimed for its own send (attempt 1,
    a later send mark) before the old delivery's delete: the delete's condition (the row still holds
    the send delivered: its attempt and a send mark no later than the pointer's) leaves it, and its
    own pointer delivers it once. Mutant: SAME_SEND on the attempt alone (the new task deleted:
    lost)."""
    claimed_ms = DUE + 1_000

    def put_and_claim() -> None:
        raw_put(stack, task, {"v": "new"})
        mark_claimed(stack, task, 1, claimed_ms)

    seen = before_handler_call(stack, "SendMessageBatch", put_and_claim)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert seen["ran"] and "error" not in seen
    assert [e["payload"] for e in delivered(stack)] == [{"v": "old"}]
    (row,) = stack.rows()
    assert row["payload"] == {"M": {"v": {"S": "new"}}}
    frozen.tick(1)
    stack.sqs.send_message(QueueUrl=stack.settings.delay_queue_url, MessageBody=DelayMessage(
        pk="scheduler", sk=task, due_ms=DUE, attempt=1, enqueued_ms=claimed_ms).body())
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert [e["payload"] for e in delivered(stack)] == [{"v": "new"}] and stack.rows() == []


def test_a_cancel_and_a_put_over_the_key_before_the_fence_deliver_only_the_new_task(stack, frozen, task):
    def cancel_and_put() -> None:
        user(stack).cancel(task)
        raw_put(stack, task, {"v": "new"})

    before_handler_call(stack, "UpdateItem", cancel_and_put)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert delivered(stack) == []  # the old pointer is for a send of the old task: dropped
    (row,) = stack.rows()
    assert row["payload"] == {"M": {"v": {"S": "new"}}}  # the new task waits for its own send
    assert poll(stack.deps).sent == 1
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert [e["payload"] for e in delivered(stack)] == [{"v": "new"}] and stack.rows() == []


def test_a_reschedule_after_the_fence_answers_already_delivered_and_changes_nothing(stack, frozen, task):
    later = DUE + 3_600_000
    seen = before_handler_call(stack, "SendMessageBatch", lambda: user(stack).reschedule(task, later))
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert isinstance(seen.get("error"), AlreadyDelivered)
    assert [e["key"] for e in delivered(stack)] == [task]  # the old due, once
    assert stack.rows() == []  # and no new task


def test_a_reschedule_before_the_fence_moves_the_task_and_the_old_due_never_goes(stack, frozen, task):
    later = DUE + 3_600_000
    seen = before_handler_call(stack, "UpdateItem", lambda: user(stack).reschedule(task, later))
    assert run_consumer(stack) == {"batchItemFailures": []}
    moved = seen["result"]
    assert delivered(stack) == []
    (row,) = stack.rows()
    assert row["sk"]["S"] == moved.key and moved.due_ms == later


class _ActingClock:
    """The consumer's clock; when a sleep passes ``at_ms`` it stops there, runs ``action``, sleeps on."""

    def __init__(self, inner: Any, at_ms: int, action: Callable[[], Any]):
        self.inner, self.at_ms, self.action = inner, at_ms, action
        self.out: Any = None
        self.ran = False

    def now_ms(self) -> int:
        return int(self.inner.now_ms())

    def sleep_ms(self, ms: int) -> None:
        now = self.now_ms()
        if not self.ran and now < self.at_ms <= now + ms:
            self.inner.sleep_ms(self.at_ms - now)
            self.ran, self.out = True, self.action()
            ms -= self.at_ms - now
        self.inner.sleep_ms(ms)


def test_a_cancel_during_the_consumers_wait_wins(stack, frozen):
    """The message arrives 1.5 s before due; the consumer waits in-process; the user cancels 0.5 s
    before due: the rows are fenced (and read) at the due ms, after the wait, so the cancel wins.
    Mutant: the rows fenced (or read) before the wait: the cancel then answers AlreadyDelivered
    (or, reading without a fence, the task goes out anyway)."""
    due = T0_MS + 1_500
    sk = schedule(stack, due, "waits", {"v": "x"})
    enqueue(stack, sk, due, delay_seconds=0)
    clock = _ActingClock(stack.deps.clock, due - 500, lambda: user(stack).cancel(sk))
    deps = dataclasses.replace(stack.deps, clock=clock)
    event = receive_event(stack)
    response = consume(event, deps)
    ack(stack, event, response)
    assert clock.ran and clock.out.key == sk  # the cancel returned
    assert delivered(stack) == [] and stack.rows() == []


def test_the_fence_covers_the_partitions_due_second_a_later_task_in_it_is_refused_then_goes_once(stack, frozen):
    """The window: two tasks due in one second; once the first is delivered (its second fenced), a
    cancel of the second, 600 ms before its due, is refused and it goes once at its own due ms. A
    task of the next second is still cancellable."""
    first = schedule(stack, DUE, "first", {"v": "1"})
    second = schedule(stack, DUE + 600, "second", {"v": "2"})
    other = schedule(stack, DUE + 1_000, "next", {"v": "3"})
    for sk, due in ((first, DUE), (second, DUE + 600), (other, DUE + 1_000)):
        enqueue(stack, sk, due, delay_seconds=0)
    outcomes: dict[str, Any] = {}

    def cancels() -> None:
        for sk in (second, other):
            try:
                outcomes[sk] = user(stack).cancel(sk)
            except AlreadyDelivered as exc:
                outcomes[sk] = exc

    seen = before_handler_call(stack, "SendMessageBatch", cancels)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert seen["ran"] and isinstance(outcomes[second], AlreadyDelivered) and outcomes[other].key == other
    got = delivered(stack)
    assert [(e["key"], e["lateness_ms"]) for e in got] == [(first, 0), (second, 0)]
    assert stack.rows() == []


def test_the_fence_expires_a_day_after_its_second_in_epoch_seconds(stack, frozen):
    """DynamoDB's TTL reads epoch seconds and ignores a time more than five years ahead: a fence
    written in ms would never expire, one item per partition and due second delivered piling up for
    good. GIVEN a task due 1.5 s into 2027 WHEN it is delivered THEN its fence item holds the second
    it fences (ms) and expires exactly a day after that second, in seconds. Kills issue 42's item 15
    mutant: ``punctual_expires`` written in ms (1,798,848,001,000: read as seconds, some 57,000 years
    ahead)."""
    from punctual.core.config import ATTR_EXPIRES, META_PK
    from punctual.core.keys import fence_key

    due = T0_MS + 1_500
    sk = schedule(stack, due, "ttl", {"v": "x"})
    enqueue(stack, sk, due, delay_seconds=0)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert [e["key"] for e in delivered(stack)] == [sk]
    fence = stack.ddb.get_item(TableName=stack.settings.table_name, ConsistentRead=True,
                               Key={"pk": {"S": META_PK}, "sk": {"S": fence_key("scheduler", due)}})["Item"]
    assert fence["sk"]["S"] == "fence#scheduler#1798761601000"
    assert fence[ATTR_EXPIRES] == {"N": "1798848001"}  # 2027-01-02T00:00:01Z, in seconds
    assert fence["fenced_ms"] == {"N": str(due)}  # written at the due ms, after the wait
