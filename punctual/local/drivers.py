"""What AWS does locally around the functions: :mod:`punctual.event_sources` on the wall clock.

Each driver is a :class:`WallClock` (a thread running its event source's actions in time order)
and adds only what is local: it discovers changes by polling the moto server other processes
write to, and runs the function on a thread pool (docs/local.md, docs/architecture.md "Around
the functions").

- :class:`RuleDriver`: EventBridge. Reads the rule (``describe_rule``) every ``tick_s`` into a
  :class:`~punctual.event_sources.RuleSource` per target.
- :class:`SqsDriver`: the Lambda SQS poller. Polls the queue every ``idle_s`` through a
  :class:`~punctual.event_sources.QueueSource` (the queue's redrive policy moves poison messages
  to the DLQ after ``maxReceiveCount`` receives).
- :class:`StreamDriver`: the Lambda DynamoDB Streams poller. Reads the table's stream through the
  ``dynamodbstreams`` API every ``idle_s`` into a :class:`~punctual.event_sources.StreamSource`.
- :class:`SnsDriver`: SNS -> Lambda, a topic's lambda subscription (direct delivery's control
  topic -> the poller): each message published invokes the function asynchronously through an
  :class:`~punctual.event_sources.AsyncInvocations`, as the rule's target is.

An OnFailure destination (a rule target's or a topic subscriber's EventInvokeConfig, a stream
mapping's DestinationConfig) is a queue URL or a topic ARN: :func:`send_to_destination`.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# event_sources imports .filters, which runs this package's __init__ (then this module): a module
# reference works whichever is imported first
from punctual import event_sources as es
from punctual.core.cron import MINUTE_MS
from punctual.lambda_events import (
    ASYNC_RETRY_DELAYS_MS,
    async_failure_record,
    async_retry_delays,
    scheduled_event,
    sns_event,
    stream_failure_record,
    stream_record,
)

from .filters import sqs_view
from .invoke import LocalFunction
from .provision import Mapping, Queue, Rule, Subscription, Table

ASYNC_RETRY_DELAYS_S = tuple(ms / 1000 for ms in ASYNC_RETRY_DELAYS_MS)


def is_topic_arn(where: str) -> bool:
    return where.startswith("arn:") and where.split(":")[2:3] == ["sns"]


def send_to_destination(sqs: Any, sns: Any, where: str, body: dict[str, Any]) -> None:
    """Send an invocation record to an OnFailure destination: a topic (by ARN: published, which
    the topic's subscribers then see) or a queue (by URL)."""
    if is_topic_arn(where):
        if sns is None:
            raise ValueError(f"no SNS client to publish to {where}")
        sns.publish(TopicArn=where, Message=json.dumps(body))
    else:
        sqs.send_message(QueueUrl=where, MessageBody=json.dumps(body))


def async_retry_delays_ms(fn: LocalFunction, retry_delays_s: tuple[float, ...]) -> list[int]:
    """The retries of ``fn``'s failed asynchronous invocation: up to its MaximumRetryAttempts,
    within its MaximumEventAgeInSeconds."""
    delays = tuple(int(s * 1000) for s in retry_delays_s[: fn.spec.async_retries])
    age = fn.spec.async_max_event_age_s
    return list(delays if age is None else async_retry_delays(age * 1000, delays))


class WallClock:
    """A :class:`~punctual.event_sources.Timeline` on the wall clock (epoch ms).

    Its thread runs the actions in time order (an action whose time has passed at once); they
    must be short. ``stop()``: no new action is due from now on, but what is due runs until no
    work handed out with :meth:`run_on` is still running (an invocation's answer is not lost)."""

    def __init__(self, name: str):
        self.name = name
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._cv = threading.Condition()
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()  # equal times run in the order they were scheduled
        self._outside = 0  # work handed to other threads whose answer is still to come
        self.stopping = False

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def at(self, t_ms: int, action: Callable[[], None]) -> None:
        with self._cv:
            heapq.heappush(self._heap, (t_ms, next(self._seq), action))
            self._cv.notify()

    def run_on(self, pool: ThreadPoolExecutor, work: Callable[[], Any], done: es.Done) -> None:
        """Run ``work`` on ``pool``; ``done(result, error)`` then runs on this timeline."""
        def run() -> None:
            result, error = None, None
            try:
                result = work()
            except Exception as exc:
                error = exc
            with self._cv:
                self._outside -= 1
                heapq.heappush(self._heap, (self.now_ms(), next(self._seq), lambda: done(result, error)))
                self._cv.notify()

        with self._cv:
            self._outside += 1
        pool.submit(run)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        with self._cv:
            self.stopping = True
            self._cv.notify()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    now = self.now_ms()
                    if self._heap and self._heap[0][0] <= now:
                        action = heapq.heappop(self._heap)[2]
                        break
                    if self.stopping and self._outside == 0:
                        self.stopped()
                        return
                    wait = None if self.stopping or not self._heap else (self._heap[0][0] - now) / 1000
                    self._cv.wait(wait)
            try:
                action()
            except Exception as exc:  # keep the timeline alive; the error is for the driver to report
                self.failed(exc)

    def failed(self, exc: Exception) -> None:
        """An action raised."""

    def stopped(self) -> None:
        """The thread is about to end."""


class Driver(WallClock):
    """A wall clock with a pool for the function's invocations and a periodic read of AWS."""

    def __init__(self, name: str, log: Any, workers: int, period_s: float):
        super().__init__(name)
        self.log = log
        self.errors = 0
        self.period_s = period_s
        self.pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix=f"lambda-{name}")
        self.at(0, self._tick)

    def _tick(self) -> None:
        if self.stopping:
            return
        try:
            self.read()
            delay = self.period_s
        except Exception as exc:  # e.g. the endpoint not up yet: say so, try again in 1 s
            self.failed(exc)
            delay = 1.0
        self.at(self.now_ms() + int(delay * 1000), self._tick)

    def read(self) -> None:
        """Read AWS and hand what changed to the event source."""

    def invoke_on_pool(self, fn: LocalFunction, event: dict[str, Any], done: es.Done) -> None:
        if not self.stopping:  # a stopped poller starts nothing more
            self.run_on(self.pool, lambda: fn.invoke(event), done)

    def failed(self, exc: Exception) -> None:
        self.errors += 1
        self.log(self.name.split(":")[0], f"{self.name}: {type(exc).__name__}: {exc}")

    def async_failed(self, fn: LocalFunction, retry_delays_ms: list[int], destinations: dict[str, str],
                     sqs: Any, sns: Any = None) -> Callable[[dict[str, Any], int, BaseException], None]:
        """``on_failure`` of an :class:`~punctual.event_sources.AsyncInvocations` of ``fn``: log the
        failed attempt; after the last, send the invocation record to the function's OnFailure
        destination (``destinations``: its ARN -> a queue URL or a topic ARN), or drop the event."""
        tag = self.name.split(":")[0]

        def on_failure(event: dict[str, Any], attempt: int, exc: BaseException) -> None:
            self.errors += 1
            if attempt < len(retry_delays_ms):
                self.log(tag, f"{fn.name} failed ({type(exc).__name__}: {exc}); async retry {attempt + 1} in "
                              f"{retry_delays_ms[attempt] / 1000:g}s")
                return
            dest = destinations.get(fn.spec.async_on_failure_arn or "")
            self.log(tag, f"{fn.name} failed ({type(exc).__name__}: {exc}); retries exhausted, "
                          + (f"the event to its OnFailure destination {dest}" if dest else "event dropped"))
            if dest and sqs is not None:
                record = async_failure_record(event, fn.spec.arn, attempt + 1, self.now_ms(), str(exc))
                try:
                    send_to_destination(sqs, sns, dest, record)
                except Exception as send_exc:
                    self.log(tag, f"could not write to the OnFailure destination {dest}: {send_exc}")

        return on_failure

    def stopped(self) -> None:
        self.pool.shutdown(wait=False)


class RuleDriver(Driver):
    """Fires the rule's targets when its one-shot cron minute comes (``delay_s`` into the minute,
    or anywhere in it when None). A minute that passed while the local stack was down, or between
    two reads of the rule, fires at once. A failed invocation is retried after
    ``retry_delays_s``, up to the function's ``async_retries``, then goes to its OnFailure
    destination (``destinations``: ARN -> queue URL or topic ARN)."""

    def __init__(self, rule: Rule, events: Any, targets: list[LocalFunction], log: Any,
                 delay_s: float | None = 2.0, tick_s: float = 0.25,
                 retry_delays_s: tuple[float, ...] = ASYNC_RETRY_DELAYS_S, sqs: Any = None,
                 destinations: dict[str, str] | None = None, sns: Any = None):
        super().__init__(f"rule:{rule.name}", log, workers=len(targets), period_s=tick_s)
        self.rule, self.events, self.targets = rule, events, targets
        self.delay_s = delay_s
        self.sqs, self.sns, self.destinations = sqs, sns, destinations or {}
        self.delays_ms: dict[int, int] = {}  # per minute, the same for every target
        self.sources = [self._source(fn, async_retry_delays_ms(fn, retry_delays_s)) for fn in targets]

    @property
    def fire_count(self) -> int:
        return max((s.fired for s in self.sources), default=0)

    def read(self) -> None:
        desc = self.events.describe_rule(Name=self.rule.name)
        for source in self.sources:
            source.observe(desc.get("ScheduleExpression"), desc.get("State"))

    def _delay_ms(self, minute: int) -> int:
        if minute not in self.delays_ms:
            delay = self.delay_s if self.delay_s is not None else random.uniform(0, 59.9)
            self.delays_ms[minute] = int(delay * 1000)
        return self.delays_ms[minute]

    def _source(self, fn: LocalFunction, retry_delays_ms: list[int]) -> es.RuleSource:
        """The rule with ``fn`` as its target (each target is invoked, and retried, on its own)."""
        def make_event(n: int, minute_ms: int) -> dict[str, Any]:
            late = self.now_ms() - minute_ms
            self.log("rule", f"{self.rule.name} {source.current[0]} fired {late / 1000:.1f}s into its minute "
                             f"-> {fn.name}")
            if late > MINUTE_MS:
                self.log("rule", "(that minute passed while the local stack was down: fired on start)")
            return scheduled_event(self.rule.arn, minute_ms, f"local-{minute_ms}-{n}")

        on_failure = self.async_failed(fn, retry_delays_ms, self.destinations, self.sqs, self.sns)
        source = es.RuleSource(self, lambda event, done: self.invoke_on_pool(fn, event, done), make_event=make_event,
                            fire_delay_ms=self._delay_ms, retry_delays_ms=retry_delays_ms,
                            on_begun=lambda minute: True, on_failure=on_failure)
        return source


class SnsDriver(Driver):
    """SNS -> Lambda: one ``lambda`` subscription of a topic. Every message published to the
    topic, by anyone, invokes ``fn`` asynchronously with SNS's event
    (:func:`~punctual.lambda_events.sns_event`), retried after a function error and then sent to
    its OnFailure destination as the rule's target is (:class:`~punctual.event_sources.AsyncInvocations`,
    :meth:`Driver.async_failed`).

    How the publishes are seen: moto's SNS delivers to an ``sqs`` subscription in the server's own
    process, as part of the Publish call. So the driver makes an internal queue per subscription
    (``<topic>-to-<function>``, not in the template) and subscribes it to the topic with
    RawMessageDelivery (the queue message's body is the message as published); it drains that
    queue every ``idle_s``. Whoever publishes (a function through the endpoint, a driver's
    OnFailure) goes through moto's Publish: one path. The ``lambda`` subscription itself is not
    made in moto, whose Publish would invoke moto's own Lambda backend (which has no such
    function). A message is deleted from the internal queue once read: SNS has handed it to
    Lambda, whose retries are the driver's (on its timeline; lost if the local stack stops). The
    event's MessageId is the internal queue message's id (unique per publish, as SNS's) and its
    Timestamp the queue's SentTimestamp (the publish). SNS's own redrive DLQ
    (``subscription.dlq_arn``) takes what SNS cannot hand to Lambda (throttled past its
    retries, a deleted function): never, locally."""

    def __init__(self, subscription: Subscription, topic_name: str, fn: LocalFunction, sns: Any, sqs: Any,
                 region: str, log: Any, idle_s: float = 0.05,
                 retry_delays_s: tuple[float, ...] = ASYNC_RETRY_DELAYS_S,
                 destinations: dict[str, str] | None = None, concurrency: int = 4):
        limits = [c for c in (concurrency, fn.spec.reserved_concurrency) if c]
        super().__init__(f"sns:{topic_name}", log, workers=max(1, min(limits)), period_s=idle_s)
        self.subscription, self.fn, self.sns, self.sqs, self.region = subscription, fn, sns, sqs, region
        self.topic_arn = subscription.topic_arn
        self.messages = 0
        self.queue_url = sqs.create_queue(QueueName=f"{topic_name}-to-{fn.name}"[:80])["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"]
        sns.subscribe(TopicArn=self.topic_arn, Protocol="sqs", Endpoint=queue_arn,
                      Attributes={"RawMessageDelivery": "true"})
        retry_delays_ms = async_retry_delays_ms(fn, retry_delays_s)
        self.source = es.AsyncInvocations(
            self, self._invoke, retry_delays_ms=retry_delays_ms, retry_counter="sns_retries",
            on_failure=self.async_failed(fn, retry_delays_ms, destinations or {}, sqs, sns))

    @property
    def retrying(self) -> int:
        return self.source.retrying

    def read(self) -> None:
        while not self.stopping:
            msgs = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                            AttributeNames=["SentTimestamp"]).get("Messages", [])
            if not msgs:
                return
            self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
            for m in msgs:
                self.messages += 1
                published = int(m.get("Attributes", {}).get("SentTimestamp", self.now_ms()))
                self.source.attempt(sns_event(self.topic_arn, m["Body"], m["MessageId"], published))

    def _invoke(self, event: dict[str, Any], done: es.Done) -> None:
        self.invoke_on_pool(self.fn, event, done)


class SqsDriver(Driver):
    """The Lambda SQS poller: a receive (no long polling) every ``idle_s`` and whenever a batch
    comes back full, up to ``concurrency`` batches in flight. With MaximumBatchingWindowInSeconds
    a receive gathers for up to that window on this driver's timeline (the template sets none)."""

    def __init__(self, mapping: Mapping, queue: Queue, fn: LocalFunction, sqs: Any, region: str, log: Any,
                 concurrency: int = 4, idle_s: float = 0.02):
        limits = [c for c in (concurrency, mapping.maximum_concurrency, fn.spec.reserved_concurrency) if c]
        self.concurrency = max(1, min(limits))
        super().__init__(f"sqs:{queue.name}", log, workers=self.concurrency, period_s=idle_s)
        self.mapping, self.queue, self.fn, self.sqs, self.region = mapping, queue, fn, sqs, region
        self.idle_s = idle_s
        self.batches = self.deleted = 0
        self.source = es.QueueSource(
            self, self._invoke, receive=self._gather, delete=self._delete, queue_arn=queue.arn, region=region,
            batch_size=max(1, mapping.batch_size),
            visibility_ms=int(queue.attributes.get("VisibilityTimeout", 30)) * 1000,
            initial_concurrency=self.concurrency, scale_per_minute=0, max_concurrency=self.concurrency,
            filters=mapping.filters, view=sqs_view, report_batch_item_failures=mapping.report_batch_item_failures)

    @property
    def left(self) -> int:
        """Messages a batch left on the queue (they come back after the visibility timeout)."""
        return self.source.counters["consumer_records_retried"]

    def read(self) -> None:
        self.source.poll(None)

    def _invoke(self, event: dict[str, Any], done: es.Done) -> None:
        self.batches += 1

        def answered(result: Any, error: BaseException | None) -> None:
            if error is not None:
                self.errors += 1
                self.log("sqs", f"{self.fn.name} raised {type(error).__name__}: {error}: batch left on the queue")
            done(result, error)

        self.invoke_on_pool(self.fn, event, answered)

    def _receive(self, n: int) -> list[dict[str, Any]]:
        return self.sqs.receive_message(
            QueueUrl=self.queue.url, MaxNumberOfMessages=max(1, min(10, n)), WaitTimeSeconds=0,
            AttributeNames=["All"], MessageAttributeNames=["All"],
        ).get("Messages", [])

    def _gather(self, view_ms: int | None = None) -> list[dict[str, Any]]:
        """One batch: up to BatchSize messages, gathering for MaximumBatchingWindowInSeconds (if any);
        none once stopping. (``view_ms``: the local queue is read as of now.)"""
        if self.stopping:
            return []
        size = max(1, self.mapping.batch_size)
        messages = self._receive(size)
        if not messages or self.mapping.batching_window_s <= 0:
            return messages
        end = time.monotonic() + self.mapping.batching_window_s
        while len(messages) < size and time.monotonic() < end and not self.stopping:
            more = self._receive(size - len(messages))
            messages += more
            if not more:
                time.sleep(self.idle_s)
        return messages

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        for i in range(0, len(entries), 10):
            self.sqs.delete_message_batch(QueueUrl=self.queue.url, Entries=entries[i:i + 10])
        self.deleted += len(entries)


class StreamDriver(Driver):
    """The Lambda DynamoDB Streams poller for one table (moto has one shard per stream: one lane).
    A failed batch is retried from the checkpoint after ``min(5 s, 0.1 s * 2**failures)``."""

    def __init__(self, mapping: Mapping, table: Table, fn: LocalFunction, streams: Any, region: str, log: Any,
                 idle_s: float = 0.05, sqs: Any = None, on_failure_url: str | None = None, sns: Any = None):
        if table.stream_arn is None:  # the template's mapping names the table by its stream ARN
            raise ValueError(f"table {table.name} has no stream")
        super().__init__(f"stream:{table.name}", log, workers=1, period_s=idle_s)
        self.stream_arn: str = table.stream_arn
        self.mapping, self.table, self.fn, self.streams, self.region = mapping, table, fn, streams, region
        self.sqs, self.sns, self.on_failure_url = sqs, sns, on_failure_url  # a queue URL or a topic ARN
        self.idle_s = idle_s
        self.iterators: dict[str, str | None] = {}
        self.batches = self.records = self.skipped = 0
        self.ready = threading.Event()
        self.source = es.StreamSource(
            self, self._invoke, to_record=lambda raw: stream_record(raw, self.stream_arn, region),
            filters=mapping.filters, batch_size=mapping.batch_size, max_retries=mapping.maximum_retry_attempts,
            retry_delay_ms=lambda failures: int(1000 * min(5.0, 0.1 * 2 ** min(failures, 6))),
            report_batch_item_failures=mapping.report_batch_item_failures,
            bisect_on_error=mapping.bisect_on_error, on_discard=self._on_failure,
            max_record_age_ms=mapping.max_record_age_s * 1000 if mapping.max_record_age_s is not None else None)

    @property
    def pending(self) -> int:
        """Records read from the stream and not yet done."""
        return self.source.pending()

    def read(self) -> None:
        if not self.iterators:
            self._open()
            self.ready.set()
        for sid, it in list(self.iterators.items()):
            if it is None:
                continue
            resp = self.streams.get_records(ShardIterator=it, Limit=1000)
            self.iterators[sid] = resp.get("NextShardIterator")
            if resp.get("Records"):
                self.source.add(resp["Records"])

    def _open(self) -> None:
        desc = self.streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        position = self.mapping.starting_position if self.mapping.starting_position in ("TRIM_HORIZON", "LATEST") \
            else "TRIM_HORIZON"
        for shard in desc.get("Shards", []):
            sid = shard["ShardId"]
            if sid not in self.iterators:
                self.iterators[sid] = self.streams.get_shard_iterator(
                    StreamArn=self.stream_arn, ShardId=sid, ShardIteratorType=position
                )["ShardIterator"]

    def _invoke(self, event: dict[str, Any], done: es.Done) -> None:
        self.batches += 1

        def answered(result: Any, error: BaseException | None) -> None:
            if error is None:
                self.records += len(event["Records"])
            else:
                self.errors += 1
                self.log("stream", f"{self.fn.name} raised {type(error).__name__}: {error}: batch retried")
            done(result, error)

        self.invoke_on_pool(self.fn, event, answered)

    def _on_failure(self, record: dict[str, Any], retries: int) -> None:
        """Retries exhausted: the record is skipped (:func:`~punctual.lambda_events.stream_after_failure`)
        and described on the OnFailure destination, as Lambda does."""
        self.skipped += 1
        seq = record["dynamodb"].get("SequenceNumber")
        self.log("stream", f"{self.fn.name}: record {seq} skipped after {retries} retries (MaximumRetryAttempts)")
        if self.sqs is None or not self.on_failure_url:
            return
        body = stream_failure_record([record], self.stream_arn, self.fn.spec.arn, retries + 1, self.now_ms())
        try:
            send_to_destination(self.sqs, self.sns, self.on_failure_url, body)
        except Exception as exc:
            self.log("stream", f"could not write to the OnFailure destination: {exc}")
