"""Lambda's event sources as state machines (punctual/event_sources.py), on a timeline over a
manual clock, with functions answered at once: what each source invokes, with what, and when."""

from __future__ import annotations

from typing import Any

import pytest

from punctual.core.clock import ManualClock
from punctual.core.cron import MINUTE_MS, one_shot_cron
from punctual.event_sources import QueueSource, RuleSource, StreamSource, lane_of
from tests.virtual_aws import ClockTimeline

T0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE_MS  # a minute's start


class World:
    def __init__(self) -> None:
        self.clock = ManualClock(T0)
        self.timeline = ClockTimeline(self.clock)
        self.calls: list[tuple[int, dict[str, Any]]] = []
        self.answers: list[Any] = []  # what the next invocations answer (an exception: raised)

    def invoke(self, event: dict[str, Any], done: Any) -> None:
        self.calls.append((self.clock.now_ms(), event))
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, BaseException):
            done(None, answer)
        else:
            done(answer, None)

    def run_to(self, t_ms: int) -> None:
        while (nxt := self.timeline.next_ms()) is not None and nxt <= t_ms:
            self.clock.set(max(nxt, self.clock.now_ms()))
            self.timeline.run_due()
        self.clock.set(t_ms)


def _rule(w: World, **kw: Any) -> RuleSource:
    return RuleSource(w.timeline, w.invoke, make_event=lambda n, minute: {"n": n, "minute": minute},
                      fire_delay_ms=lambda minute: 2_000, **kw)


# ---------------------------------------------------------------- rule
def test_a_one_shot_cron_fires_once_its_delay_into_its_minute_and_a_repeat_definition_changes_nothing():
    w = World()
    rule = _rule(w)
    minute = T0 + 3 * MINUTE_MS
    rule.observe(one_shot_cron(minute))
    rule.observe(one_shot_cron(minute))  # the same PutRule again
    w.run_to(minute + 10 * MINUTE_MS)
    assert w.calls == [(minute + 2_000, {"n": 1, "minute": minute})]
    rule.observe(one_shot_cron(minute), "DISABLED")
    rule.observe(one_shot_cron(minute))  # re-armed for a minute that fired: never again
    w.run_to(minute + 20 * MINUTE_MS)
    assert len(w.calls) == 1


def test_a_disabled_or_re_armed_rule_drops_its_pending_firing():
    w = World()
    rule = _rule(w)
    rule.observe(one_shot_cron(T0 + 2 * MINUTE_MS))
    rule.disabled()
    rule.observe(one_shot_cron(T0 + 5 * MINUTE_MS))
    rule.observe(one_shot_cron(T0 + 4 * MINUTE_MS))  # moved earlier: only this one fires
    w.run_to(T0 + 10 * MINUTE_MS)
    assert [t for t, _ in w.calls] == [T0 + 4 * MINUTE_MS + 2_000]


@pytest.mark.parametrize("fires", [False, True])
def test_a_minute_that_has_begun_fires_only_if_the_driver_says_so(fires):
    w = World()
    begun: list[int] = []
    rule = _rule(w, on_begun=lambda minute: begun.append(minute) or fires)
    w.clock.set(T0 + 30_000)
    rule.observe(one_shot_cron(T0))
    w.run_to(T0 + 5 * MINUTE_MS)
    assert begun == [T0]
    assert [t for t, _ in w.calls] == ([T0 + 30_000] if fires else [])


def test_a_failed_invocation_is_retried_with_the_same_event_after_1_then_2_minutes():
    w = World()
    rule = _rule(w)
    w.answers = [RuntimeError("1"), RuntimeError("2"), RuntimeError("3")]
    minute = T0 + MINUTE_MS
    rule.observe(one_shot_cron(minute))
    w.run_to(minute + 2_000)
    assert rule.retrying == 1
    w.run_to(minute + 30 * MINUTE_MS)
    fired = minute + 2_000
    assert [t for t, _ in w.calls] == [fired, fired + 60_000, fired + 180_000]
    assert all(e == {"n": 1, "minute": minute} for _, e in w.calls)
    assert rule.counters["poller_retries"] == 2 and rule.retrying == 0


# ---------------------------------------------------------------- stream
def _raw(seq: int, pk: str = "p", kind: str = "INSERT") -> dict[str, Any]:
    return {"eventName": kind, "dynamodb": {"Keys": {"pk": {"S": pk}, "sk": {"S": f"s{seq}"}},
                                            "SequenceNumber": str(seq)}}


def _seqs(event: dict[str, Any]) -> list[int]:
    return [int(r["dynamodb"]["SequenceNumber"]) for r in event["Records"]]


def _stream(w: World, **kw: Any) -> StreamSource:
    kw.setdefault("retry_delay_ms", lambda failures: 1_000)
    return StreamSource(w.timeline, w.invoke, to_record=lambda r: r, **kw)


def test_records_go_in_batches_in_order_and_filtered_ones_are_never_invoked():
    w = World()
    src = _stream(w, batch_size=2, filters=[{"eventName": ["INSERT"]}])
    src.add([_raw(1), _raw(2, kind="REMOVE"), _raw(3), _raw(4), _raw(5)])
    w.run_to(T0 + 1)
    assert [_seqs(e) for _, e in w.calls] == [[1], [3, 4], [5]]
    assert src.pending() == 0


def test_a_partial_failure_retries_from_the_checkpoint_and_gives_up_on_the_record_after_the_retries():
    w = World()
    discarded: list[tuple[int, int]] = []
    src = _stream(w, batch_size=3, max_retries=2,
                  on_discard=lambda r, n: discarded.append((int(r["dynamodb"]["SequenceNumber"]), n)))
    fail_2 = {"batchItemFailures": [{"itemIdentifier": "2"}]}
    w.answers = [fail_2, fail_2, fail_2]
    src.add([_raw(1), _raw(2), _raw(3)])
    w.run_to(T0 + 10_000)
    assert [(t - T0, _seqs(e)) for t, e in w.calls] == [(0, [1, 2, 3]), (1_000, [2, 3]), (2_000, [2, 3]), (2_000, [3])]
    assert discarded == [(2, 2)]
    assert src.pending() == 0 and src.counters["editor_records_to_dlq"] == 1


def test_bisect_on_error_splits_a_failing_batch_without_using_a_retry():
    w = World()
    src = _stream(w, batch_size=4, max_retries=0, bisect_on_error=True)
    w.answers = [RuntimeError("batch"), None, RuntimeError("half"), None, None]
    src.add([_raw(i) for i in (1, 2, 3, 4)])
    w.run_to(T0 + 1)
    assert [_seqs(e) for _, e in w.calls] == [[1, 2, 3, 4], [1, 2], [3, 4], [3], [4]]
    assert src.counters["editor_records_to_dlq"] == 0 and src.pending() == 0


def test_one_partition_key_stays_in_one_lane_and_lanes_run_side_by_side():
    w = World()
    held: list[Any] = []  # invocations not answered yet: the lanes stay busy
    src = StreamSource(w.timeline, lambda event, done: held.append((event, done)), to_record=lambda r: r,
                       lane=lane_of(4, 10), batch_size=10)
    src.add([_raw(i, pk=f"k{i % 3}") for i in range(9)])
    w.run_to(T0 + 1)
    assert len(held) == 3  # three keys, three lanes: one batch each, at once
    assert sorted(_seqs(e) for e, _ in held) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    src.add([_raw(9, pk="k0")])
    w.run_to(T0 + 2)
    assert len(held) == 3  # k0's lane is busy: its new record waits
    next(d for e, d in held if _seqs(e)[0] == 0)(None, None)
    w.run_to(T0 + 3)
    assert _seqs(held[-1][0]) == [9]


# ---------------------------------------------------------------- queue
class Queue:
    def __init__(self, n: int):
        self.msgs = [{"MessageId": f"m{i}", "ReceiptHandle": f"r{i}", "Body": "{}"} for i in range(n)]
        self.deleted: list[str] = []

    def receive(self, view: int | None) -> list[dict[str, Any]]:
        out, self.msgs = self.msgs[:10], self.msgs[10:]
        return out

    def delete(self, msgs: list[dict[str, Any]]) -> None:
        self.deleted += [m["MessageId"] for m in msgs]


def _queue(w: World, q: Queue, **kw: Any) -> QueueSource:
    return QueueSource(w.timeline, w.invoke, receive=q.receive, delete=q.delete, queue_arn="arn:q", region="r", **kw)


def test_a_batch_deletes_what_its_answer_does_not_report_failed_and_a_crash_deletes_nothing():
    w, q = World(), Queue(3)
    src = _queue(w, q, visibility_ms=30_000)
    w.answers = [{"batchItemFailures": [{"itemIdentifier": "m1"}]}]
    src.poll(None)
    assert q.deleted == ["m0", "m2"] and src.counters["consumer_records_retried"] == 1
    q2 = Queue(2)
    src2 = _queue(w, q2)
    w.answers = [RuntimeError("crash")]
    src2.poll(None)
    assert q2.deleted == [] and src2.counters["consumer_failed_batches"] == 1
    assert w.timeline.next_ms() == T0 + 30_000  # polled again when the batch is visible again


def test_messages_sqs_lost_are_deleted_unseen():
    w, q = World(), Queue(3)
    src = _queue(w, q, lost=lambda m: m["MessageId"] == "m1")
    src.poll(None)
    assert [r["messageId"] for r in w.calls[0][1]["Records"]] == ["m0", "m2"]
    assert sorted(q.deleted) == ["m0", "m1", "m2"]


def test_a_backlog_is_read_by_as_many_polls_as_the_concurrency_allows_and_it_ramps_up_while_messages_wait():
    w, q = World(), Queue(200)
    held: list[Any] = []
    src = QueueSource(w.timeline, lambda event, done: held.append(done), receive=q.receive, delete=q.delete,
                      queue_arn="arn:q", region="r", initial_concurrency=2, scale_per_minute=60, max_concurrency=4)
    src.poll(None)
    w.run_to(T0 + 1)
    assert len(held) == 2  # the first batch was full: a second poll took the other slot
    src.poll(None)  # a message's poll finds no slot free: the ramp starts
    assert src.waiting and len(held) == 2
    w.run_to(T0 + 2 * MINUTE_MS)
    assert src.limit() == 4
    held.pop(0)(None, None)  # a batch ends: the free slots fill
    w.run_to(T0 + 2 * MINUTE_MS + 1)
    assert len(held) == 4 and src.counters["esm_peak_concurrency"] == 4
