"""Lambda's event sources around Punctual's functions, written once.

What AWS does between the resources and the functions, as three state machines:

- :class:`RuleSource`: the EventBridge rule. A one-shot cron fires its target once, some delay
  into its minute; the target is an asynchronous invocation (:class:`AsyncInvocations`), retried
  with the same event after a function error (:data:`~punctual.lambda_events.ASYNC_RETRY_DELAYS_MS`).
  Arming a minute that has begun is reported (a one-shot cron for it may never fire: invariant 6).
  An SNS topic's lambda subscription (direct delivery's control topic) is the same asynchronous
  invocation, one per message published (the local stack's ``SnsDriver``).
- :class:`StreamSource`: the table's stream and the editor's event source mapping. Records go to
  lanes (a stream shard and one of its ParallelizationFactor batch slots, by partition key), one
  batch at a time per lane, in order, through the filter criteria; a failed batch is retried from
  the checkpoint after a delay, and after MaximumRetryAttempts the record at the checkpoint is
  discarded and the rest goes on (:func:`~punctual.lambda_events.stream_after_failure`).
- :class:`QueueSource`: the delay queue and the consumer's event source mapping. A poll receives
  up to a batch, invokes, then deletes what the answer does not report failed (nothing after a
  crash: the batch comes back after its visibility timeout); as many polls run at once as the
  mapping's concurrency allows, which grows while messages keep coming (the scaling ramp).

Each source runs over what its driver gives it, so the three emulations of AWS differ only in how
time passes and how a function runs (docs/architecture.md, "Around the functions"):

- a :class:`Timeline`: the current time and ``at(t, action)``; the benchmark's discrete-event
  engine, the tests' stepped virtual time, or the local stack's wall clock;
- an ``invoke(event, done)``: runs the function once with ``event`` and calls
  ``done(result, error)``; the benchmark runs it as a process of its engine (cold starts, billed
  time), the tests at once, the local stack on a thread;
- the distributions AWS does not document as rules (how long a stream record takes to reach a
  poll, where in its minute a cron fires, how long a poll takes): callables the driver passes in,
  drawn from the benchmark's models or fixed by the tests.

The rules the sources apply are the pure functions of :mod:`punctual.lambda_events`.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from punctual.core.cron import MINUTE_MS
from punctual.lambda_events import (
    ASYNC_RETRY_DELAYS_MS,
    armed_minute,
    sqs_messages_to_keep,
    sqs_record,
    stream_after_failure,
    stream_records_done,
)
from punctual.local.filters import passes

Done = Callable[[Any, BaseException | None], None]  # (the function's answer, or the error it raised)
Invoke = Callable[[dict[str, Any], Done], None]  # run the function once with the event, then done(...)
Record = dict[str, Any]


class Timeline(Protocol):
    """The time an emulation runs in."""

    def now_ms(self) -> int: ...

    def at(self, t_ms: int, action: Callable[[], None]) -> None:
        """Run ``action`` at ``t_ms`` (at once, in order, if that has passed)."""


def _zero() -> int:
    return 0


# ---------------------------------------------------------------- asynchronous invocations
class AsyncInvocations:
    """A function invoked asynchronously (a rule's target, a topic's lambda subscription): each
    event is one invocation, retried with the same event after a function error, after
    ``retry_delays_ms`` (Lambda's :data:`~punctual.lambda_events.ASYNC_RETRY_DELAYS_MS`, cut to the
    function's MaximumRetryAttempts and MaximumEventAgeInSeconds by its driver).
    ``on_failure(event, attempt, error)``: an attempt failed (0: the first); the last one is
    ``attempt == len(retry_delays_ms)``, after which Lambda sends the event to the function's
    OnFailure destination (the driver's part). A retry is counted as ``counters[retry_counter]``."""

    def __init__(self, timeline: Timeline, invoke: Invoke, *, retry_delays_ms: Sequence[int] = ASYNC_RETRY_DELAYS_MS,
                 on_failure: Callable[[dict[str, Any], int, BaseException], None] | None = None,
                 counters: Counter[str] | None = None, retry_counter: str = "async_retries"):
        self.timeline, self.invoke = timeline, invoke
        self.retry_delays_ms = tuple(retry_delays_ms)
        self.on_failure, self.retry_counter = on_failure, retry_counter
        self.counters: Counter[str] = counters if counters is not None else Counter()
        self.retrying = 0  # retries waiting to run

    def attempt(self, event: dict[str, Any], attempt: int = 0) -> None:
        """One attempt of the invocation (0: the first); a failure is retried with the same event
        while the retries last."""
        def done(_: Any, error: BaseException | None) -> None:
            if error is None:
                return
            if self.on_failure is not None:
                self.on_failure(event, attempt, error)
            if attempt < len(self.retry_delays_ms):
                self.counters[self.retry_counter] += 1
                self.retrying += 1
                self.timeline.at(self.timeline.now_ms() + self.retry_delays_ms[attempt], partial(self._retry, event, attempt + 1))

        self.invoke(event, done)

    def _retry(self, event: dict[str, Any], attempt: int) -> None:
        self.retrying -= 1
        self.attempt(event, attempt)


# ---------------------------------------------------------------- the rule -> the poller
class RuleSource(AsyncInvocations):
    """One EventBridge rule with a one-shot cron and one asynchronous Lambda target.

    ``observe(expression, state)`` is called with the rule's definition whenever it may have
    changed (after each PutRule the driver sees, or each time it reads the rule); the same
    definition again changes nothing. ``fire_delay_ms(minute)``: how far into its minute the cron
    fires and the target starts. ``make_event(n, minute)``: the event of the n-th firing.
    ``on_begun(minute) -> bool``: a definition arming a minute that has begun; True fires it at
    once (a driver that reads the rule after the fact: the local stack, the tests), False not at
    all (one that sees the PutRule itself: the benchmark counts it as a violation).
    ``on_failure(event, attempt, error)``: an attempt failed (retried while the retries last,
    counted as ``counters["poller_retries"]``: :class:`AsyncInvocations`)."""

    def __init__(self, timeline: Timeline, invoke: Invoke, *, make_event: Callable[[int, int], dict[str, Any]],
                 fire_delay_ms: Callable[[int], int] = lambda minute: 0,
                 retry_delays_ms: Sequence[int] = ASYNC_RETRY_DELAYS_MS,
                 on_begun: Callable[[int], bool] = lambda minute: False,
                 on_failure: Callable[[dict[str, Any], int, BaseException], None] | None = None,
                 counters: Counter[str] | None = None):
        super().__init__(timeline, invoke, retry_delays_ms=retry_delays_ms, on_failure=on_failure,
                         counters=counters, retry_counter="poller_retries")
        self.make_event, self.fire_delay_ms, self.on_begun = make_event, fire_delay_ms, on_begun
        self.current: tuple[Any, Any] = (None, None)
        self.generation = 0
        self.fired = 0  # firings so far
        self.fired_minutes: set[int] = set()  # a one-shot cron's minute fires once

    def observe(self, expression: str | None, state: str | None = "ENABLED") -> None:
        if (expression, state) == self.current:
            return  # the same schedule again: a pending firing stays
        self.current = (expression, state)
        self.generation += 1
        minute = armed_minute({"State": state, "ScheduleExpression": expression})
        if minute is None:
            return
        now = self.timeline.now_ms()
        if minute <= now - now % MINUTE_MS and not self.on_begun(minute):
            return
        if minute in self.fired_minutes:
            return
        generation = self.generation
        self.timeline.at(minute + self.fire_delay_ms(minute), lambda: self._fire(generation, minute))

    def disabled(self) -> None:
        """DisableRule / DeleteRule: a pending firing is off."""
        self.observe(self.current[0], "DISABLED")

    def _fire(self, generation: int, minute: int) -> None:
        if generation != self.generation or minute in self.fired_minutes:
            return
        self.fired_minutes.add(minute)
        self.fired += 1
        self.attempt(self.make_event(self.fired, minute))


# ---------------------------------------------------------------- the stream -> the editor
@dataclass
class StreamLane:
    """One batch slot of one stream shard: its records not yet taken, in order."""

    pending: list[Record] = field(default_factory=list)
    busy: bool = False  # an invocation (or its retries) holds the lane
    scheduled: bool = False  # a poll is on its way


def lane_of(shards: int, parallelization: int) -> Callable[[Record], tuple[int, int]]:
    """A record's lane: its stream shard and batch slot follow its partition key (one key's
    records stay in order in one lane)."""
    def key(raw: Record) -> tuple[int, int]:
        h = zlib.crc32(raw["dynamodb"]["Keys"]["pk"]["S"].encode("utf-8"))
        return h % shards, h // shards % parallelization

    return key


class StreamSource:
    """A DynamoDB stream and one function's event source mapping on it.

    The driver hands it the stream's new records (``add``; dynamodbstreams GetRecords' shape) and
    it invokes the function with Lambda's event for each batch. ``to_record(raw)``: the event's
    record. ``latency_ms()``: from a record's arrival to the poll that takes it;
    ``retry_delay_ms(failures)``: from a failed batch to its retry. ``on_poll(taken)``: a poll
    took ``taken`` records (counted by the benchmark). ``on_discard(record, failures)``: the record
    given up on after ``max_retries`` retries. ``bisect_on_error``: a function error splits the
    batch in two, each half retried alone (BisectBatchOnFunctionError; the splits consume no
    retries). ``max_record_age_ms`` (MaximumRecordAgeInSeconds): a record older than this when its
    batch is (re)invoked is discarded like one whose retries ran out (its age from the record's
    ``ApproximateCreationDateTime``)."""

    def __init__(self, timeline: Timeline, invoke: Invoke, *, to_record: Callable[[Record], Record],
                 filters: Sequence[dict[str, Any]] = (), batch_size: int = 100, max_retries: int = 10,
                 lane: Callable[[Record], Any] = lambda raw: 0, latency_ms: Callable[[], int] = _zero,
                 retry_delay_ms: Callable[[int], int] = lambda failures: 0,
                 report_batch_item_failures: bool = True, bisect_on_error: bool = False,
                 on_poll: Callable[[int], None] | None = None,
                 on_discard: Callable[[Record, int], None] | None = None,
                 max_record_age_ms: int | None = None,
                 counters: Counter[str] | None = None):
        self.timeline, self.invoke, self.to_record = timeline, invoke, to_record
        self.max_record_age_ms = max_record_age_ms
        self.filters, self.batch_size, self.max_retries = list(filters), max(1, batch_size), max_retries
        self.lane_key, self.latency_ms, self.retry_delay_ms = lane, latency_ms, retry_delay_ms
        self.report_batch_item_failures, self.bisect_on_error = report_batch_item_failures, bisect_on_error
        self.on_poll, self.on_discard = on_poll, on_discard
        self.counters: Counter[str] = counters if counters is not None else Counter()
        self.lanes: dict[Any, StreamLane] = {}  # in order of first use
        self.in_flight = 0  # records taken, not yet done or discarded

    def add(self, raws: Sequence[Record]) -> None:
        """New records, in stream order: each joins its lane; every idle lane is polled after the
        stream's latency (Lambda polls each shard continuously)."""
        for raw in raws:
            self.lanes.setdefault(self.lane_key(raw), StreamLane()).pending.append(raw)
        for lane in self.lanes.values():
            self._notify(lane)

    def pending(self) -> int:
        """Records read from the stream and not yet done (or discarded)."""
        return sum(len(lane.pending) for lane in self.lanes.values()) + self.in_flight

    def _notify(self, lane: StreamLane) -> None:
        if lane.busy or lane.scheduled:
            return
        lane.scheduled = True
        self.timeline.at(self.timeline.now_ms() + self.latency_ms(), partial(self._poll, lane))

    def _poll(self, lane: StreamLane) -> None:
        """One poll of a lane: up to a batch of its records, through the filter criteria (the
        records filtered out count as processed); the function is invoked with what passes."""
        lane.scheduled = False
        if lane.busy:
            return
        raws = lane.pending[: self.batch_size]
        del lane.pending[: len(raws)]
        records = [self.to_record(r) for r in raws]
        passing = [r for r in records if passes(self.filters, r)]
        if self.on_poll is not None:
            self.on_poll(len(raws))
        if passing:
            self.in_flight += len(passing)
            self._invoke(lane, passing, 0)
        elif lane.pending:
            self._notify(lane)

    def _invoke(self, lane: StreamLane, records: list[Record], failures: int,
                halves: list[list[Record]] | None = None) -> None:
        """Invoke with ``records`` (``failures`` so far); ``halves``: the splits still to run."""
        lane.busy = True
        records = self._unexpired(records, failures)
        if not records:
            self._next(lane, halves)
            return

        def done(result: Any, error: BaseException | None) -> None:
            if error is not None and self.bisect_on_error and len(records) > 1:
                half = len(records) // 2  # split: the halves go on without using a retry
                self.counters["stream_bisections"] += 1
                self._invoke(lane, records[:half], failures, [records[half:]] + (halves or []))
                return
            upto = 0 if error is not None else stream_records_done(
                result, [r["dynamodb"]["SequenceNumber"] for r in records], self.report_batch_item_failures)
            self.in_flight -= upto
            retry = records[upto:]
            if retry:
                rest, bad, count = stream_after_failure(retry, failures + 1, self.max_retries)
                if bad is None:
                    self.counters["editor_retries"] += 1
                    self.timeline.at(self.timeline.now_ms() + self.retry_delay_ms(failures + 1),
                                     lambda: self._invoke(lane, rest + _flat(halves), count))
                    return
                self.in_flight -= 1
                self.counters["editor_records_to_dlq"] += 1
                if self.on_discard is not None:
                    self.on_discard(bad, self.max_retries)
                rest = rest + _flat(halves)
                if rest:  # Lambda goes on from the record after the discarded one
                    self._invoke(lane, rest, count)
                    return
            else:
                self._next(lane, halves)
                return
            lane.busy = False
            if lane.pending:
                self._notify(lane)

        self.invoke({"Records": records}, done)

    def _next(self, lane: StreamLane, halves: list[list[Record]] | None) -> None:
        """The lane goes on: the next split still to run, or the next batch."""
        if halves:
            self._invoke(lane, halves[0], 0, halves[1:])
            return
        lane.busy = False
        if lane.pending:
            self._notify(lane)

    def _unexpired(self, records: list[Record], failures: int) -> list[Record]:
        """``records`` but those past MaximumRecordAgeInSeconds, which are discarded."""
        if self.max_record_age_ms is None:
            return records
        now = self.timeline.now_ms()
        keep = []
        for r in records:
            created = r["dynamodb"].get("ApproximateCreationDateTime")
            if created is not None and now - float(created) * 1000 > self.max_record_age_ms:
                self.in_flight -= 1
                self.counters["stream_records_expired"] += 1
                if self.on_discard is not None:
                    self.on_discard(r, failures)
            else:
                keep.append(r)
        return keep


def _flat(parts: list[list[Record]] | None) -> list[Record]:
    return [r for part in parts or [] for r in part]


# ---------------------------------------------------------------- the delay queue -> the consumer
class QueueSource:
    """An SQS queue and one function's event source mapping on it.

    ``receive(view_ms)``: one ReceiveMessage of up to ``batch_size`` messages (``view_ms``: the
    time as of which the driver's queue must be read, or None for now). ``delete(messages)``:
    DeleteMessageBatch. ``poll_latency_ms()``: from a poll's start to its receive. ``lost(m)``:
    the message is one SQS lost (deleted unseen: the fault the tests and the benchmark inject).
    Concurrency: ``initial_concurrency`` batches at once, ``scale_per_minute`` more each minute
    while messages wait, up to ``max_concurrency`` (Lambda's SQS scaling)."""

    def __init__(self, timeline: Timeline, invoke: Invoke, *, receive: Callable[[int | None], list[Record]],
                 delete: Callable[[list[Record]], None], queue_arn: str, region: str,
                 batch_size: int = 10, poll_latency_ms: Callable[[], int] = _zero,
                 visibility_ms: int = 30_000, initial_concurrency: int = 5, scale_per_minute: int = 300,
                 max_concurrency: int = 1_000, filters: Sequence[dict[str, Any]] = (),
                 view: Callable[[Record], Record] | None = None, report_batch_item_failures: bool = True,
                 lost: Callable[[Record], bool] | None = None, counters: Counter[str] | None = None):
        self.timeline, self.invoke, self.receive, self.delete = timeline, invoke, receive, delete
        self.queue_arn, self.region, self.batch_size = queue_arn, region, batch_size
        self.poll_latency_ms, self.visibility_ms = poll_latency_ms, visibility_ms
        self.initial_concurrency, self.scale_per_minute = initial_concurrency, scale_per_minute
        self.max_concurrency = max_concurrency
        self.filters, self.view = list(filters), view
        self.report_batch_item_failures, self.lost = report_batch_item_failures, lost
        self.counters: Counter[str] = counters if counters is not None else Counter()
        self.inflight = 0
        self.scale_start: int | None = None
        self.waiting = False  # a poll found every slot taken
        self.backlog = False  # the last receive came back full: more messages are waiting
        self.poll_views: dict[int, int | None] = {}  # polls scheduled, one per ms: the latest view each must take
        self.fill_pending = 0  # polls scheduled by fill, not yet run

    def limit(self) -> int:
        if self.scale_start is None:
            return self.initial_concurrency
        steps = (self.timeline.now_ms() - self.scale_start) * self.scale_per_minute // MINUTE_MS
        return min(self.max_concurrency, self.initial_concurrency + steps)

    def schedule(self, t_ms: int, view: int | None = None) -> None:
        """A poll at ``t_ms`` that reads the queue as of ``view`` (a message the driver knows
        becomes visible then). One poll at a ms serves every message scheduled for it: it reads
        the queue as of the latest view."""
        if t_ms in self.poll_views:
            if view is not None:
                self.poll_views[t_ms] = max(view, self.poll_views.get(t_ms) or view)
            return
        self.poll_views[t_ms] = view
        self.timeline.at(t_ms, lambda: self.poll(self.poll_views.pop(t_ms, view)))

    def fill(self) -> None:
        """Lambda keeps ``limit`` processes reading batches while messages are available: a poll
        for every free slot (not one successor per full batch, which would cap a backlog at one
        batch per poll latency whatever the scaling limit)."""
        free = self.limit() - self.inflight - self.fill_pending
        for _ in range(max(0, free)):
            self.fill_pending += 1
            self.timeline.at(self.timeline.now_ms() + self.poll_latency_ms(), self._fill_poll)

    def _fill_poll(self) -> None:
        self.fill_pending -= 1
        self.poll(None)

    def poll(self, view: int | None) -> None:
        """One poll: receive, invoke with what SQS did not lose (none while every slot is taken)."""
        if self.inflight >= self.limit():
            self.waiting = True
            if self.scale_start is None:
                self.scale_start = self.timeline.now_ms()
            return
        msgs = self.receive(view)
        gone = [m for m in msgs if self.lost is not None and self.lost(m)]
        if gone:  # SQS lost them: nobody sees them
            self.delete(gone)
            msgs = [m for m in msgs if m not in gone]
        self.backlog = len(msgs) + len(gone) == self.batch_size
        if not msgs:
            if self.backlog:
                self.fill()
            return
        self.inflight += 1
        self.counters["esm_peak_concurrency"] = max(self.counters["esm_peak_concurrency"], self.inflight)
        if self.backlog:  # more may be waiting: fill every free slot right away
            self.fill()
        received_at = self.timeline.now_ms()
        records = [sqs_record(m, self.queue_arn, self.region) for m in msgs]
        if self.filters:  # records filtered out are processed: deleted unseen
            records = [r for r in records if passes(self.filters, self.view(r) if self.view else r)]
        ids = [r["messageId"] for r in records]

        def done(result: Any, error: BaseException | None) -> None:
            self.inflight -= 1
            if error is None:
                failed = sqs_messages_to_keep(result, ids, self.report_batch_item_failures)
            else:
                failed = set(ids)
                self.counters["consumer_failed_batches"] += 1
            ok = [m for m in msgs if m["MessageId"] not in failed]
            if ok:
                self.delete(ok)
            if failed:
                self.counters["consumer_records_retried"] += len(failed)
                back = received_at + self.visibility_ms
                self.schedule(back + self.poll_latency_ms(), back)
            if self.waiting or self.backlog:
                self.waiting = False
                self.fill()
            elif self.inflight == 0:
                self.scale_start = None

        if records:
            self.invoke({"Records": records}, done)
        else:
            done(None, None)
