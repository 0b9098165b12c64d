"""Cancellation never lies in a sharded table (invariant 4; docs/architecture.md, "Cancellation never
lies" and "Shards"): a user's cancel between any two AWS calls of the consumer, over the in-memory
AWS and the interleaving harness (:mod:`tests.reliability.interleave`).

The consumer fences each (partition, due second) it delivers, then reads that partition's rows; a
cancel is a transaction that checks the fence of the task's own partition and second. Two tasks in
two partitions due in the same second, delivered by one invocation: the cancel of either, placed
before each of the consumer's calls in turn, either returns and the task never goes, or answers
AlreadyDelivered and the task goes once; never both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from punctual.client import PunctualClient
from punctual.core.clock import ManualClock
from punctual.core.config import Settings
from punctual.core.keys import encode_sk
from punctual.core.runtime import Deps
from punctual.core.usecases.consume import consume
from punctual.core.usecases.poll import poll
from punctual.errors import AlreadyDelivered
from punctual.lambda_events import sqs_record
from tests.reliability.fakeaws import GatedAws
from tests.reliability.interleave import Interleaver

T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z
DUE = T0 + 10_000
# two shards; one call at a time, so the harness can stop the consumer between any two of its calls
SETTINGS = Settings(delay_queue_url="q/delay", delivery_queue_url="q/delivery", rejected_queue_url="q/rejected",
                    send_workers=1, shards=2)
DELAY_ARN = "arn:aws:sqs:us-east-1:123456789012:delay"


def _task_in(partition: str, due_ms: int) -> str:
    """The sk of a task due at ``due_ms`` whose id falls in ``partition``."""
    return next(sk for i in range(100) if SETTINGS.partition_for_key(sk := encode_sk(due_ms, f"task-{i}")) == partition)


def _world(dues: dict[str, int]) -> tuple[GatedAws, Deps, dict[str, Any]]:
    """Rows due at ``dues`` (by sk), sent by a poll; at the first due ms, the consumer's batch that
    holds their pointers (one message per partition)."""
    clock = ManualClock(T0)
    aws = GatedAws(clock)
    deps = Deps(SETTINGS, clock, aws.ddb, aws.sqs, aws.events)
    for sk in dues:
        aws.op_put_item(TableName=SETTINGS.table_name, Item={
            "pk": {"S": SETTINGS.partition_for_key(sk)}, "sk": {"S": sk}, "payload": {"M": {"n": {"S": sk}}}})
    assert poll(deps).sent == len(dues)
    clock.set(min(dues.values()))
    msgs = aws.op_receive_message(QueueUrl=SETTINGS.delay_queue_url, MaxNumberOfMessages=10)["Messages"]
    assert len(msgs) == 2, msgs  # one per partition, both in this batch
    return aws, deps, {"Records": [sqs_record(m, DELAY_ARN, "us-east-1") for m in msgs]}


def _cancel_after(dues: dict[str, int], victim: str, calls: int) -> tuple[Any, list[str], list[str]]:
    """Deliver ``dues`` with the user's cancel of ``victim`` made once the consumer has made
    ``calls`` AWS calls (the consumer then goes on). Returns the cancel's result (or error), the
    keys delivered, and the trace of calls."""
    aws, deps, event = _world(dues)
    user = PunctualClient(SETTINGS.table_name, shards=SETTINGS.shards, ddb=aws.clients_of_one_function()[0],
                          clock=deps.clock)
    inter = Interleaver()
    aws.gate = inter.gate

    def choose(ready: list[str]) -> str:
        # the consumer's n-th turn makes its (n-1)-th call and stops before the next one
        consumer_turns = inter.actors["consumer"].steps
        return "user" if "user" in ready and (consumer_turns > calls or "consumer" not in ready) else "consumer"

    actors: dict[str, Callable[[], Any]] = {"consumer": lambda: consume(event, deps), "user": lambda: user.cancel(victim)}
    done = inter.run(actors, choose)
    aws.gate = lambda op: None
    assert done["consumer"].error is None and done["consumer"].result == {"batchItemFailures": []}
    outcome = done["user"].error if done["user"].error is not None else done["user"].result
    delivered = [json.loads(m.body)["key"] for m in aws.queue(SETTINGS.delivery_queue_url)]
    assert not [k for k in aws.items if k[0] in SETTINGS.partitions], "rows left behind"
    return outcome, delivered, [t for t in inter.trace if t.startswith("consumer:")]


@pytest.mark.parametrize("apart_ms", [0, 600], ids=["same-ms-one-run", "same-second-two-runs"])
def test_a_cancel_between_any_two_consumer_calls_never_lies_in_a_sharded_table(apart_ms):
    """GIVEN two tasks in two partitions due in the same second (on the same ms: one run whose
    partitions are fenced one after the other; 600 ms apart: two runs of one invocation) WHEN the
    user cancels either before each of the consumer's calls in turn THEN a cancel that returned
    stopped its task, one that answered AlreadyDelivered let it go once, and the cut-off is the
    fence of the task's own partition: the cancel wins before it and loses from it on, in both
    partitions. Kills issue 42's item 13 mutant: deliver skipping the fence of a second another
    partition of the same run (or invocation) had fenced: the second partition's cancel returned
    while its task was delivered (and won past its partition's read)."""
    first = _task_in("scheduler#0", DUE)
    second = _task_in("scheduler#1", DUE + apart_ms)
    dues = {first: DUE, second: DUE + apart_ms}
    _, _, trace = _cancel_after(dues, first, calls=10_000)  # a clean run: every call the consumer makes
    for victim in (first, second):
        won: list[bool] = []
        for calls in range(len(trace) + 1):
            outcome, delivered, _ = _cancel_after(dues, victim, calls)
            others = [k for k in dues if k != victim]
            if isinstance(outcome, AlreadyDelivered):
                assert sorted(delivered) == sorted(dues), (victim, calls, trace[:calls])  # it goes once
            else:
                assert outcome.key == victim, outcome
                assert delivered == others, (f"cancel of {victim} returned after {trace[:calls]}, yet it was "
                                             f"delivered: {delivered}")
            won.append(not isinstance(outcome, AlreadyDelivered))
        # the cancel wins until its partition's fence, then loses: a prefix of wins, then losses only
        cut = won.index(False)
        assert won == [True] * cut + [False] * (len(won) - cut), won
        assert trace[cut - 1] == "consumer:update_item", (victim, trace, cut)  # the call that won was the fence
