"""Threads that do locally what AWS does around the functions.

- :class:`RuleDriver`: EventBridge. Reads the rule (``describe_rule``) and, when its one-shot
  cron minute comes, invokes the target a modelled delay into the minute.
- :class:`SqsDriver`: the Lambda SQS poller. Receives batches, builds the Lambda SQS event,
  invokes, deletes the messages not listed in ``batchItemFailures`` (the queue's redrive
  policy moves poison messages to the DLQ after ``maxReceiveCount`` receives).
- :class:`StreamDriver`: the Lambda DynamoDB Streams poller. Reads the table's stream through
  the ``dynamodbstreams`` API, invokes with Lambda-shaped records, retries from the first
  failed sequence number.
"""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from punctual.core.cron import MINUTE_MS
from punctual.lambda_events import (
    ASYNC_RETRY_DELAYS_MS,
    armed_minute,
    filtered_batch_done,
    scheduled_event,
    sqs_messages_to_keep,
    sqs_record,
    stream_after_failure,
    stream_record,
    stream_records_done,
)

from .filters import passes, sqs_view
from .invoke import LocalFunction
from .provision import Mapping, Queue, Rule, Table

ASYNC_RETRY_DELAYS_S = tuple(ms / 1000 for ms in ASYNC_RETRY_DELAYS_MS)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Driver(threading.Thread):
    def __init__(self, name: str, log: Any):
        super().__init__(name=name, daemon=True)
        self.stop_event = threading.Event()
        self.log = log
        self.errors = 0

    def stop(self) -> None:
        self.stop_event.set()

    def sleep(self, seconds: float) -> bool:
        """Sleep; True when asked to stop."""
        return self.stop_event.wait(seconds)


class RuleDriver(Driver):
    """Fires the rule's targets when its one-shot cron minute comes (``delay_s`` into the minute).

    A minute that passed while the local stack was down fires at once on start (AWS would have
    fired it). Each (expression, minute) fires once, like a one-shot cron.
    """

    def __init__(self, rule: Rule, events: Any, targets: list[LocalFunction], log: Any,
                 delay_s: float | None = 2.0, tick_s: float = 0.25,
                 retry_delays_s: tuple[float, ...] = ASYNC_RETRY_DELAYS_S):
        super().__init__(f"rule:{rule.name}", log)
        self.rule, self.events, self.targets = rule, events, targets
        self.delay_s = delay_s  # None: anywhere in the minute (uniform), like EventBridge
        self.delays_ms: dict[tuple[str, int], int] = {}
        self.tick_s = tick_s
        self.retry_delays_s = retry_delays_s  # Lambda's asynchronous retries
        self.retries: list[tuple[float, LocalFunction, dict[str, Any], int]] = []
        self.fired: set[tuple[str, int]] = set()
        self.fire_count = 0

    def armed(self) -> tuple[str, int] | None:
        desc = self.events.describe_rule(Name=self.rule.name)
        minute = armed_minute(desc)  # None: disabled, or not a one-shot cron (not modelled)
        return None if minute is None else (desc["ScheduleExpression"], minute)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._due_retries()
                armed = self.armed()
                if armed is not None and armed not in self.fired:
                    fire_at = armed[1] + self._delay_ms(armed)
                    if _now_ms() >= fire_at:
                        self.fired.add(armed)
                        self.fire(armed[0], armed[1])
                        continue
            except Exception as exc:  # keep the driver alive; the error is visible in the log
                self.errors += 1
                self.log("rule", f"error: {type(exc).__name__}: {exc}")
            if self.sleep(self.tick_s):
                return

    def _delay_ms(self, armed: tuple[str, int]) -> int:
        if armed not in self.delays_ms:
            delay = self.delay_s if self.delay_s is not None else random.uniform(0, 59.9)
            self.delays_ms[armed] = int(delay * 1000)
        return self.delays_ms[armed]

    def fire(self, expr: str, minute_ms: int) -> None:
        self.fire_count += 1
        event = scheduled_event(self.rule.arn, minute_ms, f"local-{minute_ms}-{self.fire_count}")
        late = _now_ms() - minute_ms
        for fn in self.targets:
            self.log("rule", f"{self.rule.name} {expr} fired {late / 1000:.1f}s into its minute -> {fn.name}")
            self._invoke(fn, event, 0)
        if late > MINUTE_MS:
            self.log("rule", "(that minute passed while the local stack was down: fired on start)")


    def _invoke(self, fn: LocalFunction, event: dict[str, Any], attempt: int) -> None:
        """An asynchronous invocation: a failure is retried per the function's EventInvokeConfig."""
        try:
            fn.invoke(event)
        except Exception as exc:
            self.errors += 1
            if attempt < min(fn.spec.async_retries, len(self.retry_delays_s)):
                delay = self.retry_delays_s[attempt]
                self.retries.append((time.monotonic() + delay, fn, event, attempt + 1))
                self.log("rule", f"{fn.name} failed ({type(exc).__name__}: {exc}); async retry {attempt + 1} "
                                 f"in {delay:g}s")
            else:
                self.log("rule", f"{fn.name} failed ({type(exc).__name__}: {exc}); retries exhausted, event dropped")

    def _due_retries(self) -> None:
        now = time.monotonic()
        due = [r for r in self.retries if r[0] <= now]
        self.retries = [r for r in self.retries if r[0] > now]
        for _, fn, event, attempt in due:
            self._invoke(fn, event, attempt)


class SqsDriver(Driver):
    """The Lambda SQS poller: receive (no long polling), invoke up to ``concurrency`` batches at
    once, delete what succeeded."""

    def __init__(self, mapping: Mapping, queue: Queue, fn: LocalFunction, sqs: Any, region: str, log: Any,
                 concurrency: int = 4, idle_s: float = 0.02):
        super().__init__(f"sqs:{queue.name}", log)
        self.mapping, self.queue, self.fn, self.sqs, self.region = mapping, queue, fn, sqs, region
        limits = [c for c in (concurrency, mapping.maximum_concurrency, fn.spec.reserved_concurrency) if c]
        self.concurrency = max(1, min(limits))
        self.idle_s = idle_s
        self.slots = threading.Semaphore(self.concurrency)
        self.pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"lambda-{fn.name}")
        self.batches = self.deleted = self.left = 0

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                if not self.slots.acquire(timeout=0.2):
                    continue
                try:
                    messages = self._gather()
                except Exception as exc:
                    self.slots.release()
                    self.errors += 1
                    self.log("sqs", f"{self.queue.name} receive failed: {type(exc).__name__}: {exc}")
                    if self.sleep(1):
                        return
                    continue
                if not messages:
                    self.slots.release()
                    if self.sleep(self.idle_s):
                        return
                    continue
                self.pool.submit(self._batch, messages)
        finally:
            self.pool.shutdown(wait=True)

    def _receive(self, n: int) -> list[dict[str, Any]]:
        return self.sqs.receive_message(
            QueueUrl=self.queue.url, MaxNumberOfMessages=max(1, min(10, n)), WaitTimeSeconds=0,
            AttributeNames=["All"], MessageAttributeNames=["All"],
        ).get("Messages", [])

    def _gather(self) -> list[dict[str, Any]]:
        """One batch: up to BatchSize messages, gathering for MaximumBatchingWindowInSeconds (if any)."""
        size = max(1, self.mapping.batch_size)
        messages = self._receive(size)
        if not messages or self.mapping.batching_window_s <= 0:
            return messages
        end = time.monotonic() + self.mapping.batching_window_s
        while len(messages) < size and time.monotonic() < end and not self.stop_event.is_set():
            more = self._receive(size - len(messages))
            messages += more
            if not more:
                time.sleep(self.idle_s)
        return messages

    def _batch(self, messages: list[dict[str, Any]]) -> None:
        try:
            self.batches += 1
            records = [sqs_record(m, self.queue.arn, self.region) for m in messages]
            records = [r for r in records if passes(self.mapping.filters, sqs_view(r))]  # others: processed
            event = {"Records": records}
            ids = [r["messageId"] for r in records]
            try:
                result = self.fn.invoke(event) if records else None
                keep = sqs_messages_to_keep(result, ids, self.mapping.report_batch_item_failures)
            except Exception as exc:
                self.errors += 1
                self.log("sqs", f"{self.fn.name} raised {type(exc).__name__}: {exc}: batch left on the queue")
                keep = set(ids)
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                for i, m in enumerate(messages)
                if m["MessageId"] not in keep
            ]
            for i in range(0, len(entries), 10):
                self.sqs.delete_message_batch(QueueUrl=self.queue.url, Entries=entries[i:i + 10])
            self.deleted += len(entries)
            self.left += len(messages) - len(entries)
        except Exception as exc:
            self.errors += 1
            self.log("sqs", f"{self.queue.name}: {type(exc).__name__}: {exc}")
        finally:
            self.slots.release()


class StreamDriver(Driver):
    """The Lambda DynamoDB Streams poller for one table (moto has one shard per stream)."""

    def __init__(self, mapping: Mapping, table: Table, fn: LocalFunction, streams: Any, region: str, log: Any,
                 idle_s: float = 0.05, sqs: Any = None, on_failure_url: str | None = None):
        super().__init__(f"stream:{table.name}", log)
        if table.stream_arn is None:  # the template's mapping names the table by its stream ARN
            raise ValueError(f"table {table.name} has no stream")
        self.stream_arn: str = table.stream_arn
        self.mapping, self.table, self.fn, self.streams, self.region = mapping, table, fn, streams, region
        self.sqs, self.on_failure_url = sqs, on_failure_url
        self.idle_s = idle_s
        self.pending: list[dict[str, Any]] = []  # read from the shard, not yet processed
        self.iterators: dict[str, str | None] = {}
        self.batches = self.records = self.skipped = 0
        self.ready = threading.Event()

    def _open(self) -> None:
        desc = self.streams.describe_stream(StreamArn=self.table.stream_arn)["StreamDescription"]
        position = self.mapping.starting_position if self.mapping.starting_position in ("TRIM_HORIZON", "LATEST") \
            else "TRIM_HORIZON"
        for shard in desc.get("Shards", []):
            sid = shard["ShardId"]
            if sid not in self.iterators:
                self.iterators[sid] = self.streams.get_shard_iterator(
                    StreamArn=self.table.stream_arn, ShardId=sid, ShardIteratorType=position
                )["ShardIterator"]

    def _read(self) -> None:
        for sid, it in list(self.iterators.items()):
            if it is None:
                continue
            resp = self.streams.get_records(ShardIterator=it, Limit=1000)
            self.pending += resp.get("Records", [])
            self.iterators[sid] = resp.get("NextShardIterator")

    def run(self) -> None:
        attempts = 0
        while not self.stop_event.is_set():
            try:
                if not self.iterators:
                    self._open()
                    self.ready.set()
                if not self.pending:
                    self._read()
                if not self.pending:
                    if self.sleep(self.idle_s):
                        return
                    continue
                batch = self.pending[: max(1, self.mapping.batch_size)]
                ok_upto = self._invoke(batch)
                if ok_upto >= len(batch):
                    del self.pending[: len(batch)]
                    attempts = 0
                    continue
                limit = self.mapping.maximum_retry_attempts  # retried from the first failed sequence number
                self.pending, bad, attempts = stream_after_failure(self.pending[ok_upto:], attempts + 1, limit)
                if bad is not None:
                    self.skipped += 1
                    self._on_failure(bad, limit)
                    continue
                if self.sleep(min(5.0, 0.1 * 2 ** min(attempts, 6))):
                    return
            except Exception as exc:
                self.errors += 1
                self.log("stream", f"{self.table.name}: {type(exc).__name__}: {exc}")
                if self.sleep(1):
                    return

    def _on_failure(self, record: dict[str, Any], retries: int) -> None:
        """Retries exhausted: the record is skipped (:func:`~punctual.lambda_events.stream_after_failure`)
        and described on the OnFailure destination, as Lambda does."""
        seq = record["dynamodb"].get("SequenceNumber")
        self.log("stream", f"{self.fn.name}: record {seq} skipped after {retries} retries (MaximumRetryAttempts)")
        if self.sqs is None or not self.on_failure_url:
            return
        body = {
            "requestContext": {"functionArn": self.fn.spec.arn, "condition": "RetryAttemptsExhausted",
                               "approximateInvokeCount": retries + 1},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": datetime.now(UTC).isoformat(),
            "DDBStreamBatchInfo": {"shardId": next(iter(self.iterators), ""), "startSequenceNumber": seq,
                                   "endSequenceNumber": seq, "batchSize": 1, "streamArn": self.table.stream_arn},
        }
        try:
            self.sqs.send_message(QueueUrl=self.on_failure_url, MessageBody=json.dumps(body))
        except Exception as exc:
            self.log("stream", f"could not write to the OnFailure destination: {exc}")

    def _invoke(self, batch: list[dict[str, Any]]) -> int:
        """Invoke with ``batch`` (filtered); the number of leading records that succeeded."""
        self.batches += 1
        records = [stream_record(r, self.stream_arn, self.region) for r in batch]
        keep = [i for i, r in enumerate(records) if passes(self.mapping.filters, r)]
        done = self._invoke_records([batch[i] for i in keep]) if keep else 0  # filtered out: processed
        return filtered_batch_done(keep, len(batch), done)

    def _invoke_records(self, batch: list[dict[str, Any]]) -> int:
        event = {"Records": [stream_record(r, self.stream_arn, self.region) for r in batch]}
        seqs = [r["dynamodb"].get("SequenceNumber") for r in batch]
        try:
            result = self.fn.invoke(event)
        except Exception as exc:
            self.errors += 1
            self.log("stream", f"{self.fn.name} raised {type(exc).__name__}: {exc}: batch retried")
            if self.mapping.bisect_on_error and len(batch) > 1:
                half = len(batch) // 2
                first = self._invoke_records(batch[:half])
                return first if first < half else half + self._invoke_records(batch[half:])
            return 0
        self.records += len(batch)
        return stream_records_done(result, seqs, self.mapping.report_batch_item_failures)

