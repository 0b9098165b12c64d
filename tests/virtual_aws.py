"""AWS in virtual time: the tests' one harness around Punctual's real use cases.

It does what Lambda's event sources, SQS and EventBridge do around the functions with the
event sources of :mod:`punctual.event_sources` (the ones the benchmark's simulator and the local
stack run too), on a timeline over the test's clock, over either backend through the same API
calls:

- **moto** (:meth:`VirtualAws.over_moto`: the ``stack`` fixture under freezegun), with moto's
  state read directly where an API call would only cost time (what is visible when, whether a
  queue or the stream has anything new);
- **the in-memory fake** (:meth:`VirtualAws.over_fake`: :class:`tests.reliability.fakeaws.GatedAws`
  and a manual clock), for the crash matrix and the property tests.

The model, all times virtual:

- ``step_ms``: the grid on which the event sources poll. A message made visible at ``t`` reaches
  the consumer at the first step at or after ``t``; a failed stream batch is retried at the next
  step. ``receive_latency_ms``: from the receive to the consumer's code running (the clock moves
  this much first). The e2e tests keep the defaults (:data:`STEP_MS` 100 ms,
  :data:`RECEIVE_LATENCY_MS` 30 ms: a clean delivery is at most 130 ms late); the reliability
  tests use 1 ms and 0 (lateness is then the handlers' own).
- **stream -> editor** (:class:`~punctual.event_sources.StreamSource`, one lane): records in
  order, :data:`STREAM_BATCH_SIZE` per batch, through the construct's filter criteria
  (``EDITOR_STREAM_FILTERS``; filtered-out records count as done); a function error retries the
  batch, a partial response retries from the first failed record, one step later; after
  ``max_stream_retries`` (the construct's ``EDITOR_RETRY_ATTEMPTS``) the record at the checkpoint
  is dropped and recorded in ``errors``, and the rest goes on.
- **delay queue -> consumer** (:class:`~punctual.event_sources.QueueSource`, one batch at a time):
  up to 10 visible messages per batch; what the answer does not report failed is deleted; a crash
  deletes nothing (the batch comes back after the visibility timeout, or what the consumer set).
  ``lose`` drops the n-th received messages (SQS lost them).
- **rule -> poller** (:class:`~punctual.event_sources.RuleSource`): the armed one-shot cron fires
  ``fire_offset_ms`` into its minute, once; a failed invocation is retried with the same event
  (``ASYNC_RETRY_DELAYS_MS``). Arming a minute that has begun, or a minute passing unfired while
  the world ran, is a violation (``violations``). A minute that passed while the caller moved the
  clock (the race tests advance it between actors) fires at the next step, as EventBridge would
  have fired it meanwhile.
- **control topic -> poller** (direct delivery): what is published to the topic (poll requests,
  the OnFailure records) invokes the poller at the next step with SNS's event, retried and then
  sent to its OnFailure destination like the rule's invocations (``controls``).
- Delivery and rejected queues are drained after every step (deliveries keep SQS's
  SentTimestamp).
- Between steps at which nothing can happen, time jumps to the next instant something can.

Everything is single-threaded: while the consumer waits in-process, nothing else runs. The
use cases are imported at the top and held as ``editor`` / ``consumer`` / ``poller``; the crash
matrix wraps one of them, nothing swaps in a stand-in. ``InjectedCrash`` is counted in
``crashes``; any other exception escaping a use case is recorded in ``errors``.
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from punctual.core.cron import MINUTE_MS, floor_minute, parse_one_shot_cron
from punctual.core.latencies import scheduled_minute_ms
from punctual.core.runtime import Deps
from punctual.core.stream_filter import EDITOR_STREAM_FILTERS
from punctual.core.usecases.consume import consume
from punctual.core.usecases.poll import poll
from punctual.core.usecases.process_stream import process_stream
from punctual.core.usecases.serve_controls import is_control_event, serve_controls
from punctual.deployment import (
    DELAY_MAX_RECEIVE_COUNT,
    DELAY_QUEUE_VISIBILITY_S,
    EDITOR_MAX_RECORD_AGE_S,
    EDITOR_RETRY_ATTEMPTS,
    POLLER_MAX_EVENT_AGE_S,
)
from punctual.event_sources import Done, QueueSource, Record, RuleSource, StreamSource
from punctual.lambda_events import (
    InjectedCrash,
    armed_minute,
    async_failure_record,
    async_retry_delays,
    for_sns_destination,
    scheduled_event,
    sns_event,
    stream_failure_record,
    stream_record,
)
from tests.support import REGION, Stack, StreamReader, client

try:  # real time even under freezegun
    from freezegun.api import real_perf_counter as _wall
except ImportError:  # pragma: no cover
    from time import perf_counter as _wall

STEP_MS = 100
RULE_ARN = f"arn:aws:events:{REGION}:123456789012:rule/punctual-poll"
RECEIVE_LATENCY_MS = 30
FIRE_OFFSET_MS = 5_000
# The delay queue as the construct sets it (punctual/deployment.py): a failed or crashed batch comes
# back after 180 s, and a message received more than 10 times goes to the delay DLQ instead.
VISIBILITY_TIMEOUT_MS = DELAY_QUEUE_VISIBILITY_S * 1000
MAX_RECEIVE_COUNT = DELAY_MAX_RECEIVE_COUNT
POLLER_MAX_EVENT_AGE_MS = POLLER_MAX_EVENT_AGE_S * 1000
STREAM_BATCH_SIZE = 100  # the construct's editor BatchSize
MAX_STREAM_RETRIES = EDITOR_RETRY_ATTEMPTS  # the construct's (punctual/deployment.py)
FUNCTIONS = ("editor", "consumer", "poller")
# Lambda retries a throttled invocation without counting it a failure. Asynchronous (the poller):
# "the retry interval increases exponentially from 1 second after the first attempt to a maximum
# of 5 minutes", for up to the event's maximum age (6 h; Lambda developer guide, "Asynchronous
# invocation"). A stream batch is retried until it succeeds; the interval is not documented:
# ASSUMED the same backoff capped at 1 minute.
# A throttled SQS batch: "Lambda gradually backs off retries ... until the message's timestamp
# exceeds your queue's visibility timeout" (Lambda operator guide, "Handling errors for an SQS event
# source"): ASSUMED the same backoff capped at 1 minute, within the visibility timeout.
THROTTLE_RETRY_MS: dict[str, Callable[[int], int]] = {
    "poller": lambda n: min(1_000 * 2 ** n, 300_000),
    "editor": lambda n: min(1_000 * 2 ** n, 60_000),
    "consumer": lambda n: min(1_000 * 2 ** n, 60_000),
}
_MAX_ROUNDS = 1_000  # work at one instant beyond this is a runaway loop


# ------------------------------------------------------------------ what came out
@dataclass
class Delivery:
    event: dict[str, Any]
    sent_ms: int  # when SQS accepted it (SentTimestamp)

    @property
    def key(self) -> str:
        return str(self.event["key"])


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

    def violations(self) -> list[str]:
        """What breaks invariants 1, 2 and 4-5 here: rows lost, events early, deliveries of rows
        cancelled or never written, duplicates of one row with different event ids."""
        out = []
        if self.lost:
            out.append(f"lost {self.lost}")
        if self.early:
            out.append(f"early {self.early}")
        if self.unexpected:
            out.append(f"unexpected {self.unexpected}")
        if self.split_ids:
            out.append(f"duplicates with different ids {self.split_ids}")
        return out

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


@dataclass
class Log:
    deliveries: list[Delivery] = field(default_factory=list)  # delivery-queue messages, in order
    rejected: list[dict[str, Any]] = field(default_factory=list)  # rejected-queue bodies
    crashes: list[str] = field(default_factory=list)  # "consumer: crash after X #1"
    errors: list[str] = field(default_factory=list)  # unexpected exceptions out of a use case, dropped records
    violations: list[str] = field(default_factory=list)  # modelled-AWS invariants broken
    dead_letters: list[dict[str, Any]] = field(default_factory=list)  # delay-queue messages SQS moved to its DLQ
    failure_notices: list[dict[str, Any]] = field(default_factory=list)  # Lambda's OnFailure records (the delay queue, or the control topic)
    throttled: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FUNCTIONS, 0))  # invocations refused
    polls: list[int] = field(default_factory=list)  # virtual start time of each poller attempt
    controls: list[int] = field(default_factory=list)  # ... of each poller invocation by the control topic
    invocations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FUNCTIONS, 0))
    wall_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FUNCTIONS, 0.0))  # real seconds

    @property
    def delivered(self) -> list[dict[str, Any]]:
        """The delivered events, in order."""
        return [d.event for d in self.deliveries]


# ------------------------------------------------------------------ the backends' shortcuts
class _MotoView:
    """moto's state, read directly (API calls cost ~10 ms each; these are free)."""

    def __init__(self, stack: Stack, frozen: Any):
        self.stack, self.frozen = stack, frozen
        self.reader = StreamReader(stack)
        self._stream_read = -1

    def set_time(self, ms: int) -> None:
        self.frozen.move_to(datetime.fromtimestamp(ms / 1000, tz=UTC))

    def _backend(self, service: str) -> Any:
        from moto.core import DEFAULT_ACCOUNT_ID

        if service == "sqs":
            from moto.sqs.models import sqs_backends as backends
        elif service == "events":
            from moto.events.models import events_backends as backends
        else:
            from moto.dynamodb.models import dynamodb_backends as backends
        return backends[DEFAULT_ACCOUNT_ID][REGION]

    def _queue(self, url: str) -> Any:
        return self._backend("sqs").queues[url.rsplit("/", 1)[-1]]

    def new_stream_records(self) -> list[dict[str, Any]]:
        table = self._backend("dynamodb").tables[self.stack.settings.table_name]
        written = len(table.stream_shard.items)
        if written == self._stream_read:  # skip the two stream API calls when nothing was written
            return []
        self._stream_read = written
        return self.reader.records()

    def next_visible_ms(self, url: str) -> int | None:
        """When moto will next hand out a message of ``url`` (delay over and visible)."""
        return min((max(int(m.delayed_until), int(m.visible_at) + 1) for m in self._queue(url)._messages),
                   default=None)

    def has_messages(self, url: str) -> bool:
        return bool(self._queue(url)._messages)

    def delay_ends(self, url: str) -> dict[str, int]:
        """Message id -> when its DelaySeconds end (its send plus its delay), for each message of ``url``."""
        return {m.id: int(m.delayed_until) for m in self._queue(url)._messages}

    def clients(self) -> tuple[Any, Any, Any, Any]:
        return client("dynamodb"), client("sqs"), client("events"), client("sns")

    def has_published(self) -> bool:
        return bool(self.stack.control_mirror_url) and self.has_messages(self.stack.control_mirror_url)

    def new_published(self) -> list[tuple[str, str, str, int]]:
        """The control topic's messages since the last call, as (topic, message, id, published ms):
        moto hands them to the SQS queue the stack subscribed to the topic (raw delivery)."""
        url, out = self.stack.control_mirror_url, []
        while url and self.has_messages(url):
            for m in self.stack.drain(url):
                out.append((self.stack.settings.control_topic_arn, m["Body"], m["MessageId"],
                            int(m["Attributes"]["SentTimestamp"])))
        return out

    def rule(self) -> tuple[str | None, str]:
        """The rule's schedule expression and state."""
        rule = self._backend("events").event_buses["default"].rules[self.stack.settings.rule_name]
        return rule.scheduled_expression, rule.state


class _FakeView:
    """:class:`tests.reliability.fakeaws.GatedAws`'s state (its calls are free, but not gated)."""

    def __init__(self, aws: Any, clock: Any, rule_name: str):
        self.aws, self.clock, self.rule_name = aws, clock, rule_name
        self.read = 0

    def set_time(self, ms: int) -> None:
        self.clock.set(ms)

    def new_stream_records(self) -> list[dict[str, Any]]:
        records = self.aws.stream[self.read:]
        self.read = len(self.aws.stream)
        return [stream_record(r, r.get("eventSourceARN", ""), REGION) for r in records]

    def next_visible_ms(self, url: str) -> int | None:
        return self.aws.next_visible_ms(url)

    def has_messages(self, url: str) -> bool:
        return bool(self.aws.queue(url))

    def delay_ends(self, url: str) -> dict[str, int]:
        return {m.id: m.sent_at + m.delay_seconds * 1000 for m in self.aws.queue(url)}

    def rule(self) -> tuple[str | None, str]:
        desc = self.aws.op_describe_rule(Name=self.rule_name)
        return desc["ScheduleExpression"], desc["State"]

    def clients(self) -> tuple[Any, Any, Any, Any]:
        return self.aws.clients_of_one_function()

    def has_published(self) -> bool:
        return bool(self.aws.published)

    def new_published(self) -> list[tuple[str, str, str, int]]:
        return [(p.topic_arn, p.message, p.message_id, p.at_ms) for p in self.aws.take_published()]


class ClockTimeline:
    """A :class:`~punctual.event_sources.Timeline` over the test's clock: actions wait in a heap
    until :meth:`run_due` finds the clock at or past their time (the clock moves as the harness
    steps, as the caller moves it, and as the functions sleep on it)."""

    def __init__(self, clock: Any):
        self.clock = clock
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0

    def now_ms(self) -> int:
        return int(self.clock.now_ms())

    def at(self, t_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (int(t_ms), self._seq, action))

    def next_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def run_due(self) -> None:
        while self._heap and self._heap[0][0] <= self.now_ms():
            heapq.heappop(self._heap)[2]()


# ------------------------------------------------------------------ the harness
class VirtualAws:
    """See the module docstring. ``step`` / ``run_until`` / ``run_for`` / ``settle`` advance time."""

    def __init__(self, deps: Deps, view: _MotoView | _FakeView, *, fire_offset_ms: int = FIRE_OFFSET_MS,
                 step_ms: int = STEP_MS, receive_latency_ms: int = RECEIVE_LATENCY_MS,
                 max_stream_retries: int = MAX_STREAM_RETRIES, on_invoke: Callable[[str], None] | None = None,
                 visibility_timeout_ms: int = VISIBILITY_TIMEOUT_MS, max_receive_count: int = MAX_RECEIVE_COUNT):
        if not 0 <= fire_offset_ms < MINUTE_MS:
            raise ValueError("fire_offset_ms must be within the minute")
        if step_ms < 1:
            raise ValueError("step_ms must be at least 1")
        self.deps, self.view = deps, view
        self.s = deps.settings
        self.fire_offset_ms, self.step_ms, self.receive_latency_ms = fire_offset_ms, step_ms, receive_latency_ms
        self.max_stream_retries, self.on_invoke = max_stream_retries, on_invoke
        self.visibility_timeout_ms, self.max_receive_count = visibility_timeout_ms, max_receive_count
        self.throttles: list[tuple[str, int, int]] = []  # (function, from, to): invocations refused
        self.queue_outages: list[tuple[int, int]] = []  # (from, to): the delay queue answers no receive
        # the real use cases; the crash matrix wraps one of them, nothing swaps it out
        self.editor, self.consumer, self.poller = process_stream, consume, poll
        self.control = serve_controls  # the poller's code for the control topic's events (direct delivery)
        self.deps_of: dict[str, Deps] = dict.fromkeys(FUNCTIONS, deps)
        self.log = Log()
        self.origin = self.now
        self.lose: set[int] = set()  # the n-th (1-based) received delay-queue messages SQS loses
        self.received = 0  # delay-queue messages received so far
        self._lost_ids: set[str] = set()
        self._watched_until = self.now  # the last instant a step ran; the caller may move time on
        self._firings = 0
        self.timeline = ClockTimeline(deps.clock)
        self.rule = RuleSource(self.timeline, self._invoker("poller", self._poll), make_event=self._rule_event,
                               fire_delay_ms=lambda minute: fire_offset_ms, on_begun=self._begun,
                               on_failure=self._poll_failed,
                               retry_delays_ms=async_retry_delays(POLLER_MAX_EVENT_AGE_MS))
        self.stream = StreamSource(self.timeline, self._invoker("editor", self._edit), to_record=lambda r: r,
                                   filters=EDITOR_STREAM_FILTERS, batch_size=STREAM_BATCH_SIZE,
                                   max_retries=max_stream_retries, retry_delay_ms=lambda failures: step_ms,
                                   on_discard=self._discarded, bisect_on_error=True,
                                   max_record_age_ms=EDITOR_MAX_RECORD_AGE_S * 1000)
        self.queue = QueueSource(self.timeline, self._invoker("consumer", self._consume), receive=self._receive,
                                 delete=self._delete, queue_arn=self._queue_arn(self.s.delay_queue_url), region=REGION,
                                 visibility_ms=visibility_timeout_ms, initial_concurrency=1, scale_per_minute=0,
                                 max_concurrency=1, lost=lambda m: m["MessageId"] in self._lost_ids)
        self._watch_put_rule(deps)

    @classmethod
    def over_moto(cls, stack: Stack, frozen: Any, **kw: Any) -> VirtualAws:
        """Over the moto ``stack`` under freezegun ``frozen``."""
        return cls(stack.deps, _MotoView(stack, frozen), **kw)

    @classmethod
    def over_fake(cls, deps: Deps, aws: Any, clock: Any, **kw: Any) -> VirtualAws:
        """Over a :class:`~tests.reliability.fakeaws.GatedAws` ``aws`` and its manual ``clock``."""
        kw.setdefault("step_ms", 1)
        kw.setdefault("receive_latency_ms", 0)
        return cls(deps, _FakeView(aws, clock, deps.settings.rule_name), **kw)

    def isolate(self, fn: str) -> Deps:
        """Give function ``fn`` clients of its own, so that faults registered on them touch neither
        the other functions nor the harness."""
        if fn not in FUNCTIONS:
            raise ValueError(fn)
        ddb, sqs, events, sns = self.view.clients()
        deps = Deps(settings=self.s, clock=self.deps.clock, ddb=ddb, sqs=sqs, events=events,
                    sns=sns if self.deps.sns is not None else None)
        self._watch_put_rule(deps)
        self.deps_of[fn] = deps
        return deps

    def throttle(self, fn: str, start_ms: int, end_ms: int) -> None:
        """Lambda refuses every invocation of ``fn`` from ``start_ms`` to ``end_ms`` (its
        concurrency is exhausted): the event source's own retry rules apply (the poller's
        asynchronous retries, the queue's visibility timeout, the stream's retries)."""
        if fn not in FUNCTIONS:
            raise ValueError(fn)
        self.throttles.append((fn, start_ms, end_ms))

    # -- shortcuts ------------------------------------------------------------------------
    @property
    def now(self) -> int:
        return self.deps.clock.now_ms()

    @property
    def delivered(self) -> list[dict[str, Any]]:
        return self.log.delivered

    def skip_stream(self) -> None:
        """Forget the stream records written so far (set-up rows the editor must not see)."""
        self.view.new_stream_records()
        for lane in self.stream.lanes.values():
            lane.pending.clear()

    # -- running ------------------------------------------------------------------------
    def step(self) -> bool:
        """Everything that happens at the current instant; True if anything ran."""
        busy = False
        for _ in range(_MAX_ROUNDS):
            before = sum(self.log.invocations.values())
            self._look()
            self.timeline.run_due()
            if sum(self.log.invocations.values()) == before and not self.view.has_published():
                break
            busy = True
        else:
            raise AssertionError(f"still busy after {_MAX_ROUNDS} rounds at {self.now}: a runaway loop")
        self._collect()
        self._watched_until = self.now
        return busy

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> list[dict[str, Any]]:
        """Run to ``end_ms`` (or until ``stop()`` holds after a step); returns the new deliveries."""
        first = len(self.log.deliveries)
        while True:
            self.step()
            if self.now >= end_ms or (stop is not None and stop()):
                break
            self._move_to(self._next_instant(end_ms))
        return self.log.delivered[first:]

    def run_for(self, ms: int) -> list[dict[str, Any]]:
        return self.run_until(self.now + ms)

    def settle(self, max_ms: int) -> list[dict[str, Any]]:
        """Run until nothing is pending, at most ``max_ms``; asserts it got there."""
        got = self.run_until(self.now + max_ms, stop=self.idle)
        assert self.idle(), f"not idle after {max_ms} ms: {self.pending()}"
        return got

    def idle(self) -> bool:
        return not any(self.pending().values())

    def pending(self) -> dict[str, Any]:
        """What is still in the system: task rows, delay-queue messages, an armed rule, stream
        records read but not done, a poller retry."""
        return {
            "rows": self.pending_rows(),
            "delay_messages": bool(self.s.delay_queue_url) and self.view.has_messages(self.s.delay_queue_url),
            # direct delivery: events sent with a delay, not visible yet
            "delayed_events": self.s.direct and self.view.has_messages(self.s.delivery_queue_url),
            "armed_minute": self.armed_minute(),
            "stream": self.stream.pending(),
            "poller_retry": self.rule.retrying,
        }

    def pending_rows(self) -> int:
        total = 0
        for pk in self.s.partitions:
            resp = self.deps.ddb.query(TableName=self.s.table_name, KeyConditionExpression="pk = :p",
                                       ExpressionAttributeValues={":p": {"S": pk}}, Select="COUNT",
                                       ConsistentRead=True)
            total += resp.get("Count", len(resp.get("Items", [])))
        return total

    def outcome(self, expected: dict[str, int], cancelled: set[str] | None = None,
                ready: dict[str, int] | None = None) -> Outcome:
        return Outcome(expected, list(self.log.deliveries), cancelled or set(), len(self.log.crashes),
                       list(self.log.errors), dict(ready or {}))

    # -- functions ------------------------------------------------------------------------
    def _throttled(self, name: str) -> bool:
        return any(fn == name and start <= self.now < end for fn, start, end in self.throttles)

    def _invoke(self, name: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        if self._throttled(name):
            self.log.throttled[name] += 1
            return False, None
        self.log.invocations[name] += 1
        if self.on_invoke:
            self.on_invoke(name)
        t = _wall()
        try:
            return True, fn()
        except InjectedCrash as exc:
            self.log.crashes.append(f"{name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - Lambda would retry; the test decides whether that is fine
            self.log.errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
        finally:
            self.log.wall_s[name] += _wall() - t
        return False, None

    def _invoker(self, name: str, run: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any], Done], None]:
        """An event source's invoke: at once, on this thread. A throttled invocation of the poller
        or the editor is retried by Lambda without counting as a failure (THROTTLE_RETRY); the
        consumer's batch was received, so it comes back after the visibility timeout."""
        def invoke(event: dict[str, Any], done: Done, throttled: int = 0, first: int | None = None) -> None:
            first = self.now if first is None else first
            if self._throttled(name):
                self.log.throttled[name] += 1
                wait = THROTTLE_RETRY_MS[name](throttled)
                if self._throttle_expired(name, event, first, self.now + wait):
                    if name == "consumer":  # the batch goes back to the queue (QueueSource re-polls it)
                        done(None, RuntimeError("throttled"))
                    return
                self.timeline.at(self.now + wait, lambda: invoke(event, done, throttled + 1, first))
                return
            error: BaseException | None = None
            ok, out = self._invoke(name, lambda: run(event))
            if not ok:
                error = RuntimeError(f"{name} failed")
            done(out, error)

        return invoke

    def _throttle_expired(self, name: str, event: dict[str, Any], first: int, retry_at: int) -> bool:
        """Whether Lambda stops retrying a throttled invocation before ``retry_at``: a consumer batch
        goes back to the queue once its visibility timeout is over (QueueSource re-polls it then);
        the poller's event is discarded past its maximum age, to its OnFailure destination."""
        if name == "consumer" and retry_at - first >= self.visibility_timeout_ms:
            return True
        if name == "poller" and retry_at - first > POLLER_MAX_EVENT_AGE_MS:
            self._poll_failed(event, len(self.rule.retry_delays_ms), RuntimeError("throttled past the event's age"))
            return True
        return False

    def _poll(self, event: dict[str, Any]) -> Any:
        if is_control_event(event):  # the control topic's message (direct delivery)
            self.log.controls.append(self.now)
            return self.control(event, self.deps_of["poller"])
        self.log.polls.append(self.now)
        return self.poller(self.deps_of["poller"], event["id"], scheduled_minute_ms(event))

    def _edit(self, event: dict[str, Any]) -> Any:
        return self.editor(event, self.deps_of["editor"])

    def _consume(self, event: dict[str, Any]) -> Any:
        if self.receive_latency_ms:  # from the receive to the consumer's code running
            self.deps.clock.sleep_ms(self.receive_latency_ms)
        return self.consumer(event, self.deps_of["consumer"])

    def _rule_event(self, n: int, minute: int) -> dict[str, Any]:
        """EventBridge's Scheduled Event for ``minute``, its id unique to the firing."""
        self._firings += 1
        return scheduled_event(RULE_ARN, minute, f"rule-event-{self._firings}")

    def run_poller(self) -> None:
        """The rule's invocation, as if it fired now (retried like one if it fails)."""
        self.rule.attempt(self._rule_event(0, floor_minute(self.now)))

    def armed_minute(self) -> int | None:
        expression, state = self.view.rule()
        return armed_minute({"State": state, "ScheduleExpression": expression})

    def _look(self) -> None:
        """What Lambda's pollers and EventBridge see now: new stream records, the rule's
        definition, a delay-queue message visible."""
        new = self.view.new_stream_records()
        if new:
            self.stream.add(new)
        self.rule.observe(*self.view.rule())
        for topic, message, mid, published in self.view.new_published():
            # SNS invokes the subscribed poller asynchronously: retried like the rule's invocations,
            # then the OnFailure destination (the topic again) gets the invocation record
            self.rule.attempt(sns_event(topic, message, mid, published))
        visible = self.view.next_visible_ms(self.s.delay_queue_url) if self.s.delay_queue_url else None
        if visible is not None and visible <= self.now:
            self.queue.schedule(self.now)

    def _begun(self, minute: int) -> bool:
        """The rule armed for a minute that has begun, seen at a step (PutRule itself is checked by
        _check_arm): fired at once if the minute was still on at the last step."""
        if minute + MINUTE_MS <= self._watched_until:  # the minute ended while the world ran
            self.log.violations.append(f"rule armed for {minute} never fired (now {self.now})")
            return False
        return True

    def _discarded(self, record: Record, retries: int) -> None:
        """The stream mapping gave up on ``record``: its OnFailure destination (the delay queue, as
        the construct sets it) gets the invocation record."""
        self.log.errors.append(f"editor: stream record dropped after {retries} retries: "
                               f"{record['dynamodb'].get('Keys')}")
        self._on_failure_destination(stream_failure_record(
            [record], "arn:aws:dynamodb:us-east-1:123456789012:table/punctual/stream/x",
            "arn:aws:lambda:us-east-1:123456789012:function:editor", retries + 1, self.now))

    def _poll_failed(self, event: dict[str, Any], attempt: int, error: BaseException) -> None:
        """A failed attempt of the poller's asynchronous invocation: after the last one, its OnFailure
        destination (the delay queue, as the construct sets it) gets the invocation record."""
        if attempt >= len(self.rule.retry_delays_ms):
            self._on_failure_destination(async_failure_record(
                event, "arn:aws:lambda:us-east-1:123456789012:function:poller", attempt + 1, self.now, str(error)))

    def _on_failure_destination(self, record: dict[str, Any]) -> None:
        """The construct's OnFailure destination: the control topic in direct delivery, else the delay queue."""
        self.log.failure_notices.append(record)
        if self.s.control_topic_arn and self.deps.sns is not None:
            self.deps.sns.publish(TopicArn=self.s.control_topic_arn, Message=json.dumps(for_sns_destination(record)))
            return
        self.deps.sqs.send_message(QueueUrl=self.s.delay_queue_url, MessageBody=json.dumps(record))

    def _receive(self, view: int | None) -> list[dict[str, Any]]:
        if any(start <= self.now < end for start, end in self.queue_outages):
            return []  # the event source's receives fail too; it polls again when messages show
        msgs = self.deps.sqs.receive_message(
            QueueUrl=self.s.delay_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, AttributeNames=["All"],
            VisibilityTimeout=self.visibility_timeout_ms // 1000).get("Messages", [])
        # the redrive policy: a message received more than maxReceiveCount times is moved to the DLQ
        dead = [m for m in msgs if int(m["Attributes"]["ApproximateReceiveCount"]) > self.max_receive_count]
        if dead:
            self._delete(dead)
            self.log.dead_letters += dead
            msgs = [m for m in msgs if m not in dead]
        for m in msgs:
            self.received += 1
            if self.received in self.lose:
                self._lost_ids.add(m["MessageId"])
        return msgs

    def _delete(self, msgs: list[dict[str, Any]]) -> None:
        self.deps.sqs.delete_message_batch(QueueUrl=self.s.delay_queue_url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])

    def _watch_put_rule(self, deps: Deps) -> None:
        deps.events.meta.events.register("provide-client-params.events.PutRule", self._check_arm)

    def _check_arm(self, params: dict[str, Any], **_: Any) -> None:
        minute = parse_one_shot_cron(params["ScheduleExpression"])
        if minute <= self.now:
            self.log.violations.append(f"PutRule at {self.now} for minute {minute}, which has begun")

    def _queue_arn(self, url: str) -> str:
        try:
            return str(self.deps.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"]["QueueArn"])
        except Exception:  # noqa: BLE001 - the fake has no ARNs
            return f"arn:aws:sqs:{REGION}:123456789012:" + url.rsplit("/", 1)[-1]

    def _collect(self) -> None:
        # direct delivery sends with DelaySeconds: an event is delivered when its delay ends (SQS's
        # timer, read from the queue), not when it was sent
        ends = self.view.delay_ends(self.s.delivery_queue_url) if self.s.direct else {}
        for m in self._drain(self.s.delivery_queue_url):
            sent = ends.get(m["MessageId"]) or int(m.get("Attributes", {}).get("SentTimestamp", self.now))
            # numbers read exactly (Decimal), so a payload is compared digit for digit (invariant 9)
            self.log.deliveries.append(Delivery(json.loads(m["Body"], parse_float=Decimal), sent))
        self.log.rejected += [json.loads(m["Body"]) for m in self._drain(self.s.rejected_queue_url)]

    def _drain(self, url: str) -> list[dict[str, Any]]:
        """Every message of a (never delayed) queue: calls SQS only when there are some."""
        out: list[dict[str, Any]] = []
        while self.view.has_messages(url):
            msgs = self.deps.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                                 AttributeNames=["All"]).get("Messages", [])
            if not msgs:
                break
            self.deps.sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
            out += msgs
        return out

    # -- time ---------------------------------------------------------------------------
    def _grid_at_or_after(self, t: int) -> int:
        k = -(-(t - self.origin) // self.step_ms)
        return self.origin + k * self.step_ms

    def _next_instant(self, end_ms: int) -> int:
        soonest = self.now + 1
        candidates = [end_ms]
        scheduled = self.timeline.next_ms()  # a firing, a retry, a stream batch
        if scheduled is not None:
            candidates.append(max(scheduled, soonest))
        if self.s.direct:
            event = self.view.next_visible_ms(self.s.delivery_queue_url)
            if event is not None:
                candidates.append(max(event, soonest))
        visible = self.view.next_visible_ms(self.s.delay_queue_url) if self.s.delay_queue_url else None
        if visible is not None and self.queue.inflight < self.queue.limit():  # a batch slot to receive it
            # while the queue answers no receive, nothing shows before it is back
            visible = max([visible] + [end for start, end in self.queue_outages if start <= max(visible, self.now) < end])
            candidates.append(max(self._grid_at_or_after(visible), soonest))
        return min(candidates)

    def _move_to(self, t: int) -> None:
        if t > self.now:
            self.view.set_time(t)
