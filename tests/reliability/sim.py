"""A virtual-time world that does what AWS would do around Punctual's handlers.

- fires the poller when the rule's one-shot minute comes (``fire_offset_ms`` into
  the minute, like EventBridge) and re-invokes it after a failure (Lambda async
  retries: 2 more, a minute apart);
- feeds the table's stream to the editor in order, retrying a failed batch from
  its first failed record (``batchItemFailures`` / a crash retries all of it);
- receives the delay queue and invokes the consumer with real SQS event batches,
  deleting what succeeded; a crash leaves the batch to reappear after the
  visibility timeout;
- drains the delivery queue and records every event with the time SQS got it.

It works over moto (boto3 clients, freezegun time) and over
:class:`~tests.reliability.fakeaws.GatedAws` (manual time), through the same API
calls, so the crash matrix and the property tests share one notion of "lost",
"early" and "duplicate".

The handlers it invokes are the real use cases, imported at the top: a renamed one fails
the import loudly, never swapping in a stand-in.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from punctual.core import observability as obs
from punctual.core.cron import MINUTE_MS
from punctual.core.runtime import Deps
from punctual.core.usecases.consume import consume
from punctual.core.usecases.poll import poll
from punctual.core.usecases.process_stream import process_stream
from punctual.lambda_events import (
    ASYNC_RETRY_DELAYS_MS,
    armed_minute,
    sqs_messages_to_keep,
    sqs_record,
    stream_records_done,
)
from tests.faults import InjectedCrash
from tests.support import REGION

try:  # real time even under freezegun
    from freezegun.api import real_perf_counter as _wall
except ImportError:  # pragma: no cover
    from time import perf_counter as _wall

# ------------------------------------------------------------------ streams
class MotoStream:
    """Reads moto's DynamoDB stream shard by shard, as Lambda's event source would."""

    def __init__(self, session_client: Any, ddb: Any, table: str):
        self.client = session_client
        arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
        self.arn = arn
        self.iters: dict[str, str | None] = {}

    def poll(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for shard in self.client.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"]:
            sid = shard["ShardId"]
            if sid not in self.iters:
                self.iters[sid] = self.client.get_shard_iterator(
                    StreamArn=self.arn, ShardId=sid, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
            it = self.iters[sid]
            while it:
                resp = self.client.get_records(ShardIterator=it, Limit=1000)
                recs = resp.get("Records", [])
                out += [{**r, "eventSourceARN": self.arn} for r in recs]
                it = resp.get("NextShardIterator")
                self.iters[sid] = it
                if not recs:
                    break
        return out


class FakeStream:
    def __init__(self, aws: Any):
        self.aws, self.pos = aws, 0

    def poll(self) -> list[dict[str, Any]]:
        recs = self.aws.stream[self.pos:]
        self.pos = len(self.aws.stream)
        return recs


# ------------------------------------------------------------------ the world
@dataclass
class Delivery:
    event: dict[str, Any]
    sent_ms: int  # when SQS accepted it (SentTimestamp)

    @property
    def key(self) -> str:
        return self.event["key"]


@dataclass
class Outcome:
    expected: dict[str, int]  # sk -> due_ms of every row that must be delivered
    deliveries: list[Delivery]
    cancelled: set[str] = field(default_factory=set)
    crashes: int = 0
    errors: list[str] = field(default_factory=list)
    # sk -> earliest time it could be delivered (max(due, when it was written)): lateness is measured from it
    ready: dict[str, int] = field(default_factory=dict)

    @property
    def by_key(self) -> dict[str, list[Delivery]]:
        out: dict[str, list[Delivery]] = defaultdict(list)
        for d in self.deliveries:
            out[d.key].append(d)
        return out

    @property
    def lost(self) -> list[str]:
        got = self.by_key
        return sorted(k for k in self.expected if not got.get(k))

    @property
    def early(self) -> list[str]:
        return sorted({d.key for d in self.deliveries
                       if d.sent_ms < d.event["due_ms"] or d.event["delivered_at_ms"] < d.event["due_ms"]})

    @property
    def duplicates(self) -> int:
        return sum(len(v) - 1 for v in self.by_key.values())

    @property
    def unexpected(self) -> list[str]:
        """Deliveries of rows that were cancelled / rescheduled away or never existed."""
        return sorted(k for k in self.by_key if k not in self.expected)

    @property
    def split_ids(self) -> list[str]:
        """Keys whose duplicates do not share one event id."""
        return sorted(k for k, v in self.by_key.items() if len({d.event["event_id"] for d in v}) != 1)

    @property
    def max_lateness_ms(self) -> int:
        firsts = [min(v, key=lambda d: d.sent_ms) for v in self.by_key.values()]
        return max((d.sent_ms - max(d.event["due_ms"], self.ready.get(d.key, 0)) for d in firsts), default=0)

    def row(self, name: str) -> dict[str, Any]:
        """One line of the crash matrix."""
        return {"crash point": name, "delivered": len(self.by_key), "expected": len(self.expected),
                "dup": self.duplicates, "lost": len(self.lost), "early": len(self.early),
                "unexpected": len(self.unexpected), "split ids": len(self.split_ids),
                "max late ms": self.max_lateness_ms, "crashes": self.crashes}


class World:
    def __init__(
        self,
        deps: Deps,
        set_time: Callable[[int], None],
        stream: Any,
        next_visible: Callable[[], int | None] | None = None,
        fire_offset_ms: int = 5_000,
        step_ms: int = 1_000,
        on_invoke: Callable[[str], None] | None = None,
    ):
        self.deps, self.set_time, self.stream = deps, set_time, stream
        self.next_visible = next_visible
        self.fire_offset_ms, self.step_ms = fire_offset_ms, step_ms
        # the real use cases; the crash matrix wraps one of them (crashes.run_case), nothing swaps it out
        self.consumer, self.editor, self.poller = consume, process_stream, poll
        self.on_invoke = on_invoke
        self.deliveries: list[Delivery] = []
        self.pending_stream: list[dict[str, Any]] = []
        self.stream_failures = 0
        self.max_stream_retries = 10
        self.received = 0  # delay-queue messages received so far
        self.lose: set[int] = set()  # ... of which these (1-based) are lost
        self.fired: set[int] = set()
        # (at_ms, retry number, token): Lambda retries an invocation with the same event (its id
        # is the poll's token, usecases/poll.invocation_token)
        self.poller_retries: list[tuple[int, int, str]] = []
        self.poller_firings = 0
        self.crashes = 0
        self.errors: list[str] = []
        self.invocations: dict[str, int] = defaultdict(int)
        self.wall_s: dict[str, float] = defaultdict(float)  # real seconds spent in each handler
        s = deps.settings
        self.delay_arn = self._arn(s.delay_queue_url)

    def _arn(self, url: str) -> str:
        try:
            return self.deps.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"]["QueueArn"]
        except Exception:  # noqa: BLE001 - the fake has no ARNs
            return "arn:aws:sqs:us-east-1:123456789012:" + url.rsplit("/", 1)[-1]

    def now(self) -> int:
        return self.deps.clock.now_ms()

    # -- invocations -------------------------------------------------------
    def _invoke(self, name: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        self.invocations[name] += 1
        if self.on_invoke:
            self.on_invoke(name)
        t = _wall()
        try:
            return True, fn()
        except InjectedCrash:
            self.crashes += 1
            return False, None
        except Exception as exc:  # noqa: BLE001 - AWS would retry; we record it
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return False, None
        finally:
            self.wall_s[name] += _wall() - t

    def armed_minute(self) -> int | None:
        return armed_minute(self.deps.events.describe_rule(Name=self.deps.settings.rule_name))

    def run_poller(self, retry: int = 0, token: str | None = None) -> bool:
        """One attempt of the rule's asynchronous invocation (``retry`` 0: the first)."""
        if token is None:
            self.poller_firings += 1
            token = f"rule-event-{self.poller_firings}"
        ok, _ = self._invoke("poller", lambda: self.poller(self.deps, token))
        if not ok and retry < len(ASYNC_RETRY_DELAYS_MS):
            self.poller_retries.append((self.now() + ASYNC_RETRY_DELAYS_MS[retry], retry + 1, token))
        return ok

    def pump_stream(self) -> bool:
        self.pending_stream += self.stream.poll()
        if not self.pending_stream:
            return False
        batch = self.pending_stream[:100]
        ok, result = self._invoke("editor", lambda: self.editor({"Records": batch}, self.deps))
        if not ok:  # a function error: the whole batch is retried
            self.stream_failures += 1
            if self.stream_failures > self.max_stream_retries:
                # Lambda would give up on the record (MaximumRetryAttempts): a poison record
                self.errors.append(f"editor: poison stream record dropped: {batch[0]['dynamodb'].get('Keys')}")
                self.pending_stream = self.pending_stream[1:]
                self.stream_failures = 0
            return True  # the whole batch is retried
        self.stream_failures = 0
        done = stream_records_done(result, [r["dynamodb"].get("SequenceNumber") for r in batch])
        self.pending_stream = self.pending_stream[done:]
        return True

    def pump_consumer(self) -> bool:
        s = self.deps.settings
        resp = self.deps.sqs.receive_message(QueueUrl=s.delay_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                             AttributeNames=["All"])
        msgs = resp.get("Messages", [])
        if not msgs:
            return False
        kept = []
        for m in msgs:
            self.received += 1
            if self.received in self.lose:  # SQS lost it: gone, nobody sees it
                self.deps.sqs.delete_message(QueueUrl=s.delay_queue_url, ReceiptHandle=m["ReceiptHandle"])
            else:
                kept.append(m)
        msgs = kept
        if not msgs:
            return True
        event = {"Records": [sqs_record(m, self.delay_arn, REGION) for m in msgs]}
        ok, result = self._invoke("consumer", lambda: self.consumer(event, self.deps))
        if ok:
            keep = sqs_messages_to_keep(result, [m["MessageId"] for m in msgs])
            done = [m for m in msgs if m["MessageId"] not in keep]
            if done:
                self.deps.sqs.delete_message_batch(
                    QueueUrl=s.delay_queue_url,
                    Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
                )
        return True

    def drain_deliveries(self) -> None:
        s = self.deps.settings
        while True:
            resp = self.deps.sqs.receive_message(QueueUrl=s.delivery_queue_url, MaxNumberOfMessages=10,
                                                 WaitTimeSeconds=0, AttributeNames=["All"])
            msgs = resp.get("Messages", [])
            if not msgs:
                return
            for m in msgs:
                sent = int(m.get("Attributes", {}).get("SentTimestamp", self.now()))
                self.deliveries.append(Delivery(json.loads(m["Body"]), sent))
            self.deps.sqs.delete_message_batch(
                QueueUrl=s.delivery_queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)],
            )

    def fire_rule(self) -> bool:
        now = self.now()
        for at, retry, token in list(self.poller_retries):
            if at <= now:
                self.poller_retries.remove((at, retry, token))
                self.run_poller(retry, token)
                return True
        armed = self.armed_minute()
        if armed is not None and armed not in self.fired and now >= armed + self.fire_offset_ms:
            self.fired.add(armed)
            self.run_poller()
            return True
        return False

    def step(self) -> bool:
        """Do everything due now; True if anything ran."""
        did = False
        for _ in range(1000):
            progressed = self.pump_stream()
            progressed = self.fire_rule() or progressed
            progressed = self.pump_consumer() or progressed
            if not progressed:
                break
            did = True
        self.drain_deliveries()
        return did

    def pending_rows(self) -> int:
        s = self.deps.settings
        total = 0
        for pk in s.partitions:
            resp = self.deps.ddb.query(TableName=s.table_name, KeyConditionExpression="pk = :p",
                                       ExpressionAttributeValues={":p": {"S": pk}},
                                       Select="COUNT", ConsistentRead=True)
            total += resp.get("Count", len(resp.get("Items", [])))
        return total

    def _queue_busy(self) -> bool:
        attrs = self.deps.sqs.get_queue_attributes(
            QueueUrl=self.deps.settings.delay_queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                            "ApproximateNumberOfMessagesDelayed"],
        )["Attributes"]
        return any(int(attrs.get(k, 0)) for k in ("ApproximateNumberOfMessages",
                                                  "ApproximateNumberOfMessagesNotVisible",
                                                  "ApproximateNumberOfMessagesDelayed"))

    def next_time(self, until_ms: int) -> int:
        now = self.now()
        cands = [until_ms]
        armed = self.armed_minute()
        if armed is not None and armed not in self.fired:
            cands.append(max(now + 1, armed + self.fire_offset_ms))
        cands += [max(now + 1, at) for at, _, _ in self.poller_retries]
        if self.next_visible is not None:
            nv = self.next_visible()
            if nv is not None:
                cands.append(max(now + 1, nv))
        elif self._queue_busy():
            cands.append(now + self.step_ms)
        return min(cands)

    def run(self, until_ms: int) -> None:
        """Advance virtual time to ``until_ms``, doing what AWS would on the way."""
        while True:
            self.step()
            now = self.now()
            if now >= until_ms:
                return
            if not self.pending_stream and self.pending_rows() == 0 and not self._queue_busy() \
                    and not self.poller_retries:
                # nothing left to deliver; let the last poll (if armed soon) run and stop
                return
            self.set_time(self.next_time(until_ms))

    def outcome(self, expected: dict[str, int], cancelled: set[str] | None = None,
                ready: dict[str, int] | None = None) -> Outcome:
        return Outcome(expected, list(self.deliveries), cancelled or set(), self.crashes, list(self.errors),
                       dict(ready or {}))


def minute_of(ms: int) -> int:
    return ms - ms % MINUTE_MS


__all__ = ["World", "Outcome", "Delivery", "MotoStream", "FakeStream", "obs"]
