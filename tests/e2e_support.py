"""A small "AWS in virtual time": drives editor, consumer and poller the way Lambda's event
source mappings, SQS and EventBridge would, against the moto stack, under freezegun.

The model (parameters of :class:`VirtualAws`, all times virtual):

- ``step_ms`` (default :data:`STEP_MS` = 100 ms): the grid on which the event source
  mappings poll. New stream records reach the editor at the first step after they are
  written (stream latency <= one step); delay-queue messages reach the consumer at the
  first step at which SQS makes them visible (in batches of up to 10, like the ESM).
- ``receive_latency_ms`` (default :data:`RECEIVE_LATENCY_MS` = 30 ms): from the ESM's
  ReceiveMessage to the consumer's code running; the clock advances this much first.
  Modelled lateness of a delivery is therefore ``<= step_ms + receive_latency_ms`` for a
  message that became visible after its due time, and 0 for one that became visible in
  time (DelaySeconds is planned ``wake_early_ms`` before due and the consumer waits the
  rest to the exact ms).
- ``fire_offset_ms`` (default :data:`FIRE_OFFSET_MS` = 5 s): EventBridge fires the armed
  one-shot cron this long into its minute, target start included; the poller then runs.
  A one-shot cron fires once; a cron whose minute had begun when PutRule was called is a
  violation of invariant 6 (recorded in ``violations``), as is a fire that never came.
- Consumer acks follow ReportBatchItemFailures: records not reported failed are deleted;
  failed ones stay in the queue and come back after their visibility timeout (the queue's
  30 s, or what the consumer set with ChangeMessageVisibility); a crash deletes nothing.
- Poller: a failed invocation (crash or exception) is retried like Lambda retries an
  asynchronous invocation: twice, 1 minute after the failure and 2 minutes after the failed
  retry (:data:`punctual.lambda_events.ASYNC_RETRY_DELAYS_MS`).
- Editor: a crash (or any exception) retries the same batch at the next step; reported
  failures retry the batch from the first failed record on (Lambda's checkpoint).
- The functions share the stack's boto3 clients unless :meth:`VirtualAws.isolate` gives one
  function clients of its own, so that :class:`tests.faults.Faults` registered on them
  (``sim.isolate("consumer").ddb`` ...) touches neither the others nor the harness. ``InjectedCrash`` is caught per invocation and recorded in ``crashes``; any other
  exception escaping a handler is recorded in ``errors`` (tests assert it stays empty).
- Between steps at which nothing can happen, time jumps to the next instant something
  can: a delay-queue message becomes visible (read from moto's queue), the rule fires,
  or the end of the run. A 3-day horizon therefore costs a few hundred steps.

The whole simulation is single-threaded: while the consumer waits in-process (freezegun
tick), nothing else runs, as if the other functions were idle meanwhile.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from moto.core import DEFAULT_ACCOUNT_ID

from punctual.core.cron import MINUTE_MS, parse_one_shot_cron
from punctual.core.runtime import Deps
from punctual.core.usecases.consume import consume
from punctual.core.usecases.poll import poll
from punctual.core.usecases.process_stream import process_stream
from punctual.lambda_events import ASYNC_RETRY_DELAYS_MS, armed_minute, stream_records_done
from tests.consumer_support import ack, queue_arn, to_lambda_record
from tests.faults import InjectedCrash
from tests.support import REGION, Stack, StreamReader, client

STEP_MS = 100
RECEIVE_LATENCY_MS = 30
FIRE_OFFSET_MS = 5_000
VISIBILITY_TIMEOUT_MS = 30_000  # the moto delay queue's (the default); the construct sets 6 x the consumer timeout
MAX_STREAM_RETRIES = 50  # a batch retried more often blocks the shard: a test failure


def function_deps(stack: Stack) -> Deps:
    """Deps for one function: the stack's settings and clock, clients of its own."""
    clients = {name: client(name) for name in ("dynamodb", "sqs", "events")}
    return Deps(settings=stack.settings, clock=stack.deps.clock, ddb=clients["dynamodb"],
                sqs=clients["sqs"], events=clients["events"])


@dataclass
class Log:
    delivered: list[dict[str, Any]] = field(default_factory=list)  # delivery-queue bodies, in order
    rejected: list[dict[str, Any]] = field(default_factory=list)  # rejected-queue bodies
    crashes: list[str] = field(default_factory=list)  # "consumer: crash after X #1"
    errors: list[str] = field(default_factory=list)  # unexpected exceptions out of a handler
    violations: list[str] = field(default_factory=list)  # modelled-AWS invariants broken
    polls: list[int] = field(default_factory=list)  # virtual start time of each poll
    invocations: dict[str, int] = field(default_factory=lambda: {"editor": 0, "consumer": 0, "poller": 0})


class VirtualAws:
    """See the module docstring. ``run_for``/``run_until``/``settle`` advance virtual time."""

    def __init__(self, stack: Stack, frozen: Any, *, step_ms: int = STEP_MS,
                 receive_latency_ms: int = RECEIVE_LATENCY_MS, fire_offset_ms: int = FIRE_OFFSET_MS,
                 stream_batch_size: int = 100):
        if not 0 <= fire_offset_ms < MINUTE_MS:
            raise ValueError("fire_offset_ms must be within the minute")
        self.stack, self.frozen, self.clock = stack, frozen, stack.deps.clock
        self.s = stack.settings
        self.step_ms, self.receive_latency_ms, self.fire_offset_ms = step_ms, receive_latency_ms, fire_offset_ms
        self.stream_batch_size = stream_batch_size
        self.reader = StreamReader(stack)
        self.editor = self.consumer = self.poller = stack.deps
        stack.events.meta.events.register("provide-client-params.events.PutRule", self._check_arm)
        self.origin = self.clock.now_ms()
        self.log = Log()
        self._delay_arn = queue_arn(stack, self.s.delay_queue_url)
        self._backlog: list[dict[str, Any]] = []
        self._retry: list[dict[str, Any]] | None = None
        self._retries = 0
        self._fired: set[int] = set()
        self._stream_read = -1
        self._poll_retries: list[int] = []  # when the next retry of a failed poller runs (one at a time)
        self._poll_retry = 0  # retries of the current invocation so far

    def isolate(self, fn: str) -> Deps:
        """Give function ``fn`` ("editor", "consumer" or "poller") boto3 clients of its own."""
        if fn not in ("editor", "consumer", "poller"):
            raise ValueError(fn)
        deps = function_deps(self.stack)
        deps.events.meta.events.register("provide-client-params.events.PutRule", self._check_arm)
        setattr(self, fn, deps)
        return deps

    # -- shortcuts ------------------------------------------------------------------------
    @property
    def delivered(self) -> list[dict[str, Any]]:
        return self.log.delivered

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    # -- running ------------------------------------------------------------------------
    def step(self) -> bool:
        """Everything that happens at the current instant; True if anything ran."""
        busy = self._run_editor()
        busy = self._run_consumer() or busy
        busy = self._fire_rule() or busy
        self._collect()
        return busy

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> list[dict[str, Any]]:
        """Run to ``end_ms`` (or until ``stop()`` holds after a quiet step); returns the new deliveries."""
        first = len(self.log.delivered)
        while True:
            busy = self.step()
            if self.now >= end_ms or (not busy and stop is not None and stop()):
                break
            self._move_to(self._next_instant(busy, end_ms))
        return self.log.delivered[first:]

    def run_for(self, ms: int) -> list[dict[str, Any]]:
        return self.run_until(self.now + ms)

    def settle(self, max_ms: int) -> list[dict[str, Any]]:
        """Run until nothing is pending (no task row, no delay-queue message, rule disabled,
        no stream record waiting), at most ``max_ms``; asserts it got there."""
        got = self.run_until(self.now + max_ms, stop=self.idle)
        assert self.idle(), f"not idle after {max_ms} ms: {self.pending()}"
        return got

    def idle(self) -> bool:
        return not any(self.pending().values())

    def pending(self) -> dict[str, Any]:
        """What is still in the system (the stream counts only records already read)."""
        return {
            "rows": [r["sk"]["S"] for r in self.stack.rows()],
            "delay_messages": len(self._delay_queue()._messages),
            "armed_minute": self._armed_minute(),
            "stream": len(self._backlog) + len(self._retry or []),
            "poller_retries": list(self._poll_retries),
        }

    # -- functions ------------------------------------------------------------------------
    def _invoke(self, name: str, fn: Callable[[], Any]) -> Any:
        self.log.invocations[name] += 1
        try:
            return fn()
        except InjectedCrash as exc:
            self.log.crashes.append(f"{name}: {exc}")
        except Exception as exc:  # Lambda would retry; the test decides whether that is fine
            self.log.errors.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
        return None

    def _run_editor(self) -> bool:
        if self._retry is not None:
            batch, self._retry = self._retry, None
        else:
            written = len(self._table().stream_shard.items)
            if written != self._stream_read:  # skip the two stream API calls when nothing was written
                self._stream_read = written
                self._backlog += self.reader.records()
            batch = self._backlog[: self.stream_batch_size]
            self._backlog = self._backlog[len(batch):]
        if not batch:
            return False
        out = self._invoke("editor", lambda: process_stream({"Records": batch}, self.editor))
        if out is None:
            self._retry = batch  # a function error: Lambda retries the same batch
        else:
            seqs = [r["dynamodb"]["SequenceNumber"] for r in batch]
            failed = {f["itemIdentifier"] for f in out["batchItemFailures"]}
            assert failed <= set(seqs), f"unknown itemIdentifier(s) {failed - set(seqs)}"
            done = stream_records_done(out, seqs)
            if done < len(batch):
                self._retry = batch[done:]  # checkpoint before the first failure
        if self._retry is not None:
            self._retries += 1
            if self._retries > MAX_STREAM_RETRIES:
                raise AssertionError(f"stream batch retried {self._retries} times: the shard is blocked")
        else:
            self._retries = 0
        return True

    def _run_consumer(self) -> bool:
        ran = False
        while True:
            visible = self._next_visible_ms()
            if visible is None or visible > self.now:
                return ran
            msgs = self.stack.sqs.receive_message(
                QueueUrl=self.s.delay_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0, AttributeNames=["All"],
            ).get("Messages", [])
            if not msgs:
                return ran
            ran = True
            event = {"Records": [to_lambda_record(m, self._delay_arn) for m in msgs]}
            self.clock.sleep_ms(self.receive_latency_ms)
            out = self._invoke("consumer", lambda ev=event: consume(ev, self.consumer))
            if out is not None:
                ack(self.stack, event, out)

    def _fire_rule(self) -> bool:
        ran = False
        if self._poll_retries and self._poll_retries[0] <= self.now:
            # Lambda's asynchronous invocation retries a failed poller (ASYNC_RETRY_DELAYS_MS).
            self._poll_retries.pop(0)
            ran = True
            self._poll_or_retry()
        minute = self._armed_minute()
        if minute is None or minute in self._fired or self.now < minute + self.fire_offset_ms:
            return ran
        self._fired.add(minute)
        if self.now >= minute + MINUTE_MS:
            self.log.violations.append(f"rule armed for {minute} never fired (now {self.now})")
            return ran
        self._poll_retry = 0
        self._poll_or_retry()
        return True

    def _poll_or_retry(self) -> None:
        """One attempt of the poller's invocation; a failed one is retried later, while retries last."""
        self.log.polls.append(self.now)
        if self._invoke("poller", lambda: poll(self.poller)) is not None:
            return
        if self._poll_retry < len(ASYNC_RETRY_DELAYS_MS):
            self._poll_retries = [self.now + ASYNC_RETRY_DELAYS_MS[self._poll_retry]]
            self._poll_retry += 1

    def _check_arm(self, params: dict[str, Any], **_: Any) -> None:
        minute = parse_one_shot_cron(params["ScheduleExpression"])
        if minute <= self.now:
            self.log.violations.append(f"PutRule at {self.now} for minute {minute}, which has begun")

    def _collect(self) -> None:
        self.log.delivered += self._drain(self.s.delivery_queue_url)
        self.log.rejected += self._drain(self.s.rejected_queue_url)

    def _drain(self, url: str) -> list[dict[str, Any]]:
        """Bodies of every message of a (never delayed) queue: calls SQS only when there are some."""
        out: list[dict[str, Any]] = []
        while self._queue(url)._messages:
            msgs = self.stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            msgs = msgs.get("Messages", [])
            if not msgs:
                break
            self.stack.sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
            out += [json.loads(m["Body"]) for m in msgs]
        return out

    # -- moto's state, read directly (API calls cost ~10 ms each; these are free) ----------
    def _armed_minute(self) -> int | None:
        from moto.events.models import events_backends

        rule = events_backends[DEFAULT_ACCOUNT_ID][REGION].event_buses["default"].rules[self.s.rule_name]
        return armed_minute({"State": rule.state, "ScheduleExpression": rule.scheduled_expression})

    def _table(self) -> Any:
        from moto.dynamodb.models import dynamodb_backends

        return dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION].tables[self.s.table_name]

    def _queue(self, url: str) -> Any:
        from moto.sqs.models import sqs_backends

        return sqs_backends[DEFAULT_ACCOUNT_ID][REGION].queues[url.rsplit("/", 1)[-1]]

    def _delay_queue(self) -> Any:
        return self._queue(self.s.delay_queue_url)

    def _next_visible_ms(self) -> int | None:
        """When moto will next hand out a delay-queue message (delay over and visible)."""
        times = [max(int(m.delayed_until), int(m.visible_at) + 1) for m in self._delay_queue()._messages]
        return min(times, default=None)

    # -- time ---------------------------------------------------------------------------

    def _grid_at_or_after(self, t: int) -> int:
        k = -(-(t - self.origin) // self.step_ms)
        return self.origin + k * self.step_ms

    def _next_instant(self, busy: bool, end_ms: int) -> int:
        now = self.now
        next_step = self._grid_at_or_after(now + 1)
        if busy or self._retry is not None or self._backlog:
            return min(next_step, end_ms)
        candidates = [end_ms]
        visible = self._next_visible_ms()
        if visible is not None:
            candidates.append(max(self._grid_at_or_after(visible), next_step))
        minute = self._armed_minute()
        if minute is not None and minute not in self._fired:
            candidates.append(max(minute + self.fire_offset_ms, now + 1))
        candidates += [max(t, now + 1) for t in self._poll_retries[:1]]
        return min(candidates)

    def _move_to(self, t: int) -> None:
        if t > self.now:
            self.frozen.move_to(datetime.fromtimestamp(t / 1000, tz=UTC))

