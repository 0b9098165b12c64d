"""Punctual in virtual time: the REAL poller, consumer and editor handlers against moto.

What the simulator models (parameters in :mod:`punctual.bench.models`):
- the EventBridge rule: every PutRule/DisableRule the handlers make is observed; an armed
  one-shot cron fires 0-60 s into its minute plus a target start delay, then the poller runs
  as an asynchronous invocation (2 retries after 1 and 2 min on failure);
- the delay queue and Lambda's SQS event source: each message sent is picked up around the
  time it becomes visible (up to ``sqs_early_max_ms`` early, after a polling latency),
  10 per batch, with the scaling ramp (5 concurrent batches, +300 per minute); successful
  records are deleted, batchItemFailures and crashed batches come back after the visibility
  timeout (or what ChangeMessageVisibility set);
- the table's stream and its Lambda trigger: records are read with the dynamodbstreams
  client, filtered like the construct's filter criteria, 100 per batch, one batch at a time,
  failed batches retried (from the lowest failed sequence number on partial failure);
- Lambda: cold starts for new execution environments, reuse while warm, billed duration;
- AWS call latency, added to the calling handler's virtual time;
- direct delivery's control topic (SNS): each message published to it (poll requests from the
  handlers, OnFailure records from Lambda) invokes the poller asynchronously after a delivery
  latency, with the retries and the OnFailure destination (the topic) of the rule's invocations;
  no delay queue, no consumer, no idle receives;
- faults: botocore hooks fail calls (InternalError/ThrottlingException) and crash the
  function right after a call (its effects up to the crash remain).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from punctual.core.metrics_names import COLD_STARTS, PICKUP_MS, POLL_DELAY_MS, STREAM_LAG_MS
from punctual.core.parallel import lanes, run_in_order
from punctual.core.retry import seed_jitter
from punctual.core.stream_filter import EDITOR_STREAM_FILTERS
from punctual.deployment import CONSUMER_TIMEOUT_S, EDITOR_TIMEOUT_S, POLLER_TIMEOUT_S
from punctual.event_sources import AsyncInvocations, Invoke, QueueSource, RuleSource, StreamSource, lane_of
from punctual.lambda_events import (
    InjectedCrash,
    async_failure_record,
    for_sns_destination,
    scheduled_event,
    sns_event,
    stream_failure_record,
    stream_record,
)

from .billing import IDLE_RECEIVE_API, emf_metrics, fixed_monthly, idle_receives
from .capacity import PartitionCapacity, get_read_units, is_throttled, query_read_units, transact_write_units
from .control_plane import ControlPlaneQuota, throttling_error
from .cpu import request_cpu_ms, response_cpu_ms, whole_ms
from .engine import Engine, Process, SimClock
from .models import Models
from .outages import Outage, service_outage
from .prices import SNS_CHUNK_BYTES
from .scenarios import Scenario, after_recovery_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

    from punctual.core.config import Settings
    from punctual.core.runtime import Deps

REGION = "us-east-1"
EPOCH_MS = 1_798_761_600_000  # 2027-01-01T00:00:00Z: virtual time starts here
WRITE_OPS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
# The handlers' self-measurement metrics the run keeps (RunResult.self_measured).
SELF_MEASURED = (PICKUP_MS, COLD_STARTS, POLL_DELAY_MS, STREAM_LAG_MS)
THROTTLED_PREFIX = "ddb_throttled:"  # counters of requests refused over a partition's limit
EVENTS_THROTTLED_PREFIX = "events_throttled:"  # counters of rule calls refused over the account's quota
MEMORY_MB = {"poller": 1024, "consumer": 512, "editor": 512}  # the construct's sizes
# The construct's timeouts: each invocation's code gets its deadline, as from Lambda's context (the
# chunk reserve, the consumer's wait bound act on it). The simulator does not stop an invocation at
# its timeout: one that ran longer is counted (past_timeout:<fn>), figures a deployment could not give.
TIMEOUT_S = {"poller": POLLER_TIMEOUT_S, "consumer": CONSUMER_TIMEOUT_S, "editor": EDITOR_TIMEOUT_S}
CONTROL_TOPIC = "punctual-control"  # direct delivery's control topic (SNS), the poller subscribed to it
POLLER_ARN = f"arn:aws:lambda:{REGION}:123456789012:function:poller"
RULE_ARN = f"arn:aws:events:{REGION}:123456789012:rule/punctual-poll"
EDITOR_ARN = f"arn:aws:lambda:{REGION}:123456789012:function:editor"
CONTROL_TOPIC_ARN_FAKE = f"arn:aws:sns:{REGION}:123456789012:{CONTROL_TOPIC}"  # moto makes the same one


@dataclass(frozen=True)
class SimContext:
    """The Lambda context a simulated invocation's handler gets: its remaining time is the function's
    timeout (the handler reads it once, at its start: runtime.start_invocation)."""

    function_name: str
    aws_request_id: str
    timeout_ms: int

    def get_remaining_time_in_millis(self) -> int:
        return self.timeout_ms


@dataclass
class _Environment:
    """A Lambda execution environment: free since ``free_ms`` and kept until ``kept_until_ms`` (its idle
    lifetime drawn when it went idle: Models.warm_idle_ms), with what it keeps between invocations (its Deps)."""

    free_ms: int
    deps: Deps
    kept_until_ms: int = 0


@dataclass
class Invocation:
    fn: str
    start_ms: int
    duration_ms: int
    cold: bool
    sent: int  # messages this invocation sent (0 = idle invocation)
    error: str | None
    memory_mb: int | None = None  # None: the construct's size for ``fn`` (MEMORY_MB)


@dataclass
class RunResult:
    strategy: str
    scenario: str
    n: int
    horizon_ms: int
    deliveries: dict[int, list[int]]  # task index -> delivery times (ms from start)
    dues: list[int]
    inserts: list[int]
    invocations: list[Invocation] = field(default_factory=list)
    requests: Counter = field(default_factory=Counter)  # (actor, "Service.Op") -> count
    ddb_wru: float = 0.0
    ddb_rru: float = 0.0
    log_bytes: int = 0
    extra_cost_usd: float = 0.0
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    counters: Counter = field(default_factory=Counter)
    # The run models DynamoDB's partition limits (punctual.bench.capacity): refused requests are
    # counted as counters["ddb_throttled:<actor>:<Op>"], the producer's puts refused at least
    # once as counters["user_puts_throttled"].
    partition_limits: bool = False
    # What the handlers measured of the models (their EMF records' self-measurement values), by
    # (metric name, whether the invocation was a cold start): _LogSink
    self_measured: dict[tuple[str, bool], list[float]] = field(default_factory=dict)
    # The deployment's fixed monthly cost by part (billing.fixed_monthly; empty for the alternatives' models)
    # and the custom metrics its functions emitted in the run (name, dimensions).
    fixed_monthly: dict[str, float] = field(default_factory=dict)
    metrics_emitted: list[str] = field(default_factory=list)


class _LogSink:
    """Counts the bytes the handlers log (CloudWatch Logs ingestion) without keeping them, the custom
    metrics their EMF lines define (each name + dimension set one metric: a fixed monthly cost), and the
    values of their self-measurement metrics (:data:`SELF_MEASURED`), by (metric name, cold start):
    what a deployment's EMF records would give ``punctual calibrate``."""

    def __init__(self) -> None:
        self.bytes = 0
        self.metrics: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()
        self.measured: dict[tuple[str, bool], list[float]] = defaultdict(list)

    def write(self, s: str) -> int:
        self.bytes += len(s.encode("utf-8"))
        self.metrics |= emf_metrics(s)
        if '"_aws"' in s and any(f'"{name}"' in s for name in SELF_MEASURED):
            record = json.loads(s)
            for name in SELF_MEASURED:
                value = record.get(name)
                if value is not None:
                    self.measured[name, bool(record.get("cold_start"))] += value if isinstance(value, list) else [value]
        return len(s)

    def flush(self) -> None:
        pass


class PunctualSim:
    def __init__(self, scenario: Scenario, models: Models, seed: int, settings: dict[str, Any] | None = None,
                 backend: str = "moto", name: str = "punctual"):
        """``settings``: Settings fields to override (e.g. the experiments of punctual/bench/run.py),
        ``name`` the strategy name the result carries.

        ``backend``: "moto" (boto3 clients against moto in process) or "fake" (the in-memory
        fake of :mod:`punctual.bench.fastaws`: no botocore, no moto, ~10x less CPU per task)."""
        if backend not in ("moto", "fake"):
            raise ValueError(f"unknown backend {backend!r}")
        if scenario.throttling and backend != "fake":
            raise ValueError(f"scenario {scenario.name} models DynamoDB's partition limits: use --backend fake")
        self.backend = backend
        self.sc, self.m, self.seed = scenario, models, seed
        self.overrides = dict(settings or {})
        self.rng = random.Random(seed * 7919 + 17)
        self.fault_rng = random.Random(seed * 104729 + 3)
        seed_jitter(seed * 15485863 + 7)  # the handlers' retry backoff: reproduced by the seed too
        self.engine = Engine(EPOCH_MS)
        self.clock = SimClock(self.engine)
        self.result = RunResult(name, scenario.name, scenario.n, scenario.horizon_ms, {}, scenario.dues,
                                scenario.inserts)
        self.sk_index: dict[str, int] = {}
        self._freeze_synced = EPOCH_MS
        self.sqs_view_ms: int | None = None
        # Lambda execution environments kept warm: fn -> those free now, each with its own Deps (what a
        # container keeps between invocations, e.g. arming.RuleSeen)
        self.warm: dict[str, list[_Environment]] = defaultdict(list)
        self.lost_message_ids: set[str | None] = set()
        self.faults_on = scenario.faults
        self.outages: list[Outage] = []  # made once the queues exist (_set_up)
        self.outage_plan = scenario.outages
        self.result.partition_limits = scenario.throttling
        self.running: Counter = Counter()  # invocations in progress, per function
        self.invocations_started = 0  # so far: each gets its own request id
        self.events_quota = ControlPlaneQuota(models.events_control_tps, models.events_control_burst_ms)
        self._event_sources()

    @property
    def has_delay_queue(self) -> bool:
        """A delay queue is deployed (known once set up), with the consumer's event source on it: the
        default mode. Direct delivery deploys none (no consumer, no event source, no idle receives): its
        control channel is the SNS topic (:attr:`has_control_topic`)."""
        return bool(self.settings.delay_queue_url)

    @property
    def has_control_topic(self) -> bool:
        """Direct delivery's control topic is deployed: poll requests and the OnFailure records of the
        poller and of the editor's stream are published to it, and each invokes the poller."""
        return bool(self.settings.control_topic_arn)

    # ---------------------------------------------------------------- Lambda's event sources
    def _event_sources(self) -> None:
        """The rule -> poller, the stream -> editor and the delay queue -> consumer
        (punctual.event_sources) on the engine, with the models' distributions."""
        m, counters = self.m, self.result.counters
        self.rule = RuleSource(
            self.engine, self._invoker("poller", self._run_poller), make_event=self._rule_event,
            fire_delay_ms=lambda minute: (self.rng.randint(0, m.rule_fire_spread_ms - 1)
                                          + m.rule_target_delay_ms.sample(self.rng)),
            retry_delays_ms=m.poller_retry_delays_ms, on_begun=self._armed_for_begun_minute, counters=counters,
            on_failure=self._poll_failed)
        self.stream = StreamSource(
            self.engine, self._invoker("editor", self._run_editor),
            to_record=lambda raw: stream_record(raw, self.table_arn_stream, REGION),
            filters=EDITOR_STREAM_FILTERS, batch_size=m.stream_batch_size, max_retries=m.stream_max_retries,
            lane=lane_of(m.stream_shards, m.stream_parallelization),
            latency_ms=lambda: m.stream_latency_ms.sample(self.rng),
            retry_delay_ms=lambda failures: m.stream_retry_delay_ms, on_poll=self._stream_polled, counters=counters,
            on_discard=self._stream_gave_up, bisect_on_error=True, max_record_age_ms=m.stream_max_record_age_ms)
        self.queue = QueueSource(
            self.engine, self._invoker("consumer", self._run_consumer), receive=self._esm_receive,
            delete=self._esm_delete, queue_arn=f"arn:aws:sqs:{REGION}:123456789012:punctual-delay", region=REGION,
            poll_latency_ms=lambda: m.sqs_poll_latency_ms.sample(self.rng), visibility_ms=m.delay_visibility_ms,
            initial_concurrency=m.esm_initial_concurrency, scale_per_minute=m.esm_scale_per_minute,
            max_concurrency=m.esm_max_concurrency, lost=lambda msg: msg["MessageId"] in self.lost_message_ids,
            counters=counters)
        # The control topic's subscription: SNS invokes the poller asynchronously, so Lambda's async rules
        # apply as to the rule's target (RuleSource.attempt: the same retries within the maximum event age,
        # then the OnFailure destination). Its retries are counted apart (control_retries).
        self.topic = AsyncInvocations(
            self.engine, self._invoker("poller", self._run_poller), retry_delays_ms=m.poller_retry_delays_ms,
            on_failure=self._poll_failed, counters=counters, retry_counter="control_retries")

    def _invoker(self, fn: str, run: Callable[[dict[str, Any], Any, Deps], Any]) -> Invoke:
        """An event source's invoke: ``run(event, context, deps)`` as an invocation of ``fn`` (a process of
        the engine), with the Deps of the environment it runs in."""
        def invoke(event: dict[str, Any], done: Callable[[Any, BaseException | None], None]) -> None:
            self._invoke(fn, self.engine.now, partial(run, event), lambda proc: done(proc.result, proc.error))

        return invoke

    def _run_poller(self, event: dict[str, Any], context: Any, deps: Deps) -> Any:
        """The poller's handler (functions/poller/handler.py): the control topic's event -> serve it,
        the rule's -> one poll."""
        from punctual.core.usecases.serve_controls import is_control_event

        if not is_control_event(event):
            return lambda_handler("poller")(event, context, deps)
        self.result.counters["control_invocations"] += 1
        served = lambda_handler("poller")(event, context, deps)
        if not served.get("controls"):  # not a poll request nor a notice to the core: skipped (logged)
            self.result.counters["control_unrecognised"] += 1
        return served

    @staticmethod
    def _run_editor(event: dict[str, Any], context: Any, deps: Deps) -> Any:
        return lambda_handler("editor")(event, context, deps)

    @staticmethod
    def _run_consumer(event: dict[str, Any], context: Any, deps: Deps) -> Any:
        return lambda_handler("consumer")(event, context, deps)

    def _rule_event(self, n: int, minute: int) -> dict[str, Any]:
        """The n-th firing's event: EventBridge's Scheduled Event for ``minute`` (its id is the
        invocation's token, the same in its retries)."""
        self.result.counters["rule_fired"] = n
        return scheduled_event(RULE_ARN, minute, f"rule-event-{n}")

    def _armed_for_begun_minute(self, minute: int) -> bool:
        """A one-shot cron for a minute that has begun: assume it never fires (invariant 6)."""
        self.result.counters[f"armed_for_begun_minute:{self._actor('?')}"] += 1
        return False

    def _poll_failed(self, event: dict[str, Any], attempt: int, error: BaseException) -> None:
        """An asynchronous invocation of the poller failed (the rule's, or the control topic's: AskAgain,
        a fault): after its last attempt (the same retries for both), the poller's OnFailure destination
        (the delay queue, as the construct sets it; in direct delivery the control topic itself: a
        failure notice, served alike) gets the invocation record."""
        if attempt >= len(self.m.poller_retry_delays_ms):
            self._on_failure_destination(async_failure_record(event, POLLER_ARN, attempt + 1, self.engine.now,
                                                              str(error)))

    def _stream_gave_up(self, record: dict[str, Any], retries: int) -> None:
        self._on_failure_destination(stream_failure_record(
            [record], self.table_arn_stream, EDITOR_ARN, retries + 1, self.engine.now))

    def _on_failure_destination(self, record: dict[str, Any]) -> None:
        self.result.counters["failure_notices"] += 1
        if self.has_control_topic:  # Lambda publishes it (billed as a Publish: _hook counts it and delivers it)
            if any(o.covers("Publish", {}, self.engine.now) for o in self.outages):
                # the topic is out: Lambda cannot deliver the record (it counts DestinationDeliveryFailures)
                self.result.counters["failure_notices_undelivered"] += 1
                return
            sent = for_sns_destination(record)  # Lambda drops the payloads past SNS's 256 KB
            if sent != record:
                self.result.counters["failure_notice_payload_dropped"] += 1
            message = json.dumps(sent)
            self.dest_sns.publish(TopicArn=self.settings.control_topic_arn, Message=message)
            return
        if not self.has_delay_queue:  # no destination deployed: nothing sent nor billed
            self.result.counters["failure_notices_without_destination"] += 1
            return
        self.result.requests[("lambda-destination", "sqs.SendMessage")] += 1
        self.esm_sqs.send_message(QueueUrl=self.settings.delay_queue_url, MessageBody=json.dumps(record))
        self.queue.schedule(self.engine.now + self.m.sqs_poll_latency_ms.sample(self.rng), self.engine.now)

    def _published(self, who: str, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        """A message published to the control topic: SNS invokes the poller with it (asynchronously) after
        its delivery latency; deliveries to Lambda are free (punctual.bench.prices)."""
        if self.backend == "fake":
            self.aws.take_published()  # delivered from here: the fake keeps nothing
        kind = "notice" if who == "lambda-destination" else "request"
        self.result.counters[f"control_published:{kind}"] += 1
        event = sns_event(params["TopicArn"], params["Message"], parsed["MessageId"], self.engine.now)

        def deliver() -> None:
            self.result.counters[f"control_delivered:{kind}"] += 1
            self.topic.attempt(event)

        self.engine.at(self.engine.now + self.m.sns_delivery_latency_ms.sample(self.rng), deliver)

    def _stream_polled(self, taken: int) -> None:
        self.result.counters["stream_records"] += taken
        self.result.requests[("lambda-stream-poller", "dynamodbstreams.GetRecords")] += 1

    def _esm_receive(self, view: int | None) -> list[dict[str, Any]]:
        """The Lambda SQS poller's receive, reading the queue as of ``view`` (a message the
        simulator scheduled the poll for is visible then); none while the delay queue is out."""
        for outage in self.outages:
            if outage.covers("ReceiveMessage", {"QueueUrl": self.settings.delay_queue_url}, self.engine.now):
                back = outage.end_ms
                self.queue.schedule(back + self.m.sqs_poll_latency_ms.sample(self.rng), back)
                return []
        self.sqs_view_ms = max(self.engine.now, view or 0)
        try:
            return self.esm_sqs.receive_message(
                QueueUrl=self.settings.delay_queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                AttributeNames=["All"],
            ).get("Messages", [])
        finally:
            self.sqs_view_ms = None

    def _esm_delete(self, msgs: list[dict[str, Any]]) -> None:
        self.esm_sqs.delete_message_batch(
            QueueUrl=self.settings.delay_queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])

    # ---------------------------------------------------------------- set-up
    def _u(self, lo_hi: tuple[int, int]) -> int:
        return self.rng.randint(lo_hi[0], lo_hi[1])

    def _sync_time(self) -> None:
        if self._freeze_synced != self.engine.now:
            self._freeze_synced = self.engine.now
            self.frozen.move_to(datetime.fromtimestamp(self.engine.now / 1000, tz=UTC))

    def _moto_speedups(self) -> list[tuple[Any, str, Any]]:
        """moto computes every queue attribute (3 scans of the queue, ~80 k clock reads for a
        few hundred messages) on each SendMessage, and reads the clock through freezegun's
        slow path for each message it looks at. The handlers never read those attributes:
        the simulator makes them cheap and gives moto's SQS the virtual clock directly."""
        import moto.sqs.models as sqsm

        patches: list[tuple[Any, str, Any]] = []

        def patch(obj: Any, name: str, value: Any) -> None:
            patches.append((obj, name, getattr(obj, name)))
            setattr(obj, name, value)

        def view_ms() -> int:
            return self.sqs_view_ms if self.sqs_view_ms is not None else self.engine.now

        patch(sqsm, "unix_time_millis", lambda dt=None: float(view_ms()) if dt is None else _orig_ms(dt))
        patch(sqsm, "unix_time", lambda dt=None: view_ms() / 1000.0 if dt is None else _orig_s(dt))
        for prop in ("approximate_number_of_messages", "approximate_number_of_messages_delayed",
                     "approximate_number_of_messages_not_visible"):
            patch(sqsm.Queue, prop, property(lambda self: 0))
        return patches

    def _setup_fake(self) -> None:
        from punctual.core.config import Settings

        from .fastaws import BenchAws, BenchClient

        sim = self

        class _ViewClock:  # what the fake sees as "now" (SQS receives look at the view time)
            def now_ms(self) -> int:
                return sim.sqs_view_ms if sim.sqs_view_ms is not None else sim.engine.now

        s = Settings()
        m = self.m
        capacity = (PartitionCapacity(m.ddb_partition_wcu_per_s, m.ddb_partition_rcu_per_s, m.ddb_partition_burst_ms)
                    if self.sc.throttling else None)
        self.aws = aws = BenchAws(clock=_ViewClock(), table_name=s.table_name, query_page=1_000,
                                  visibility_timeout_s=m.delay_visibility_ms // 1000, capacity=capacity)
        delay, delivery, rejected = (f"https://sqs.{REGION}.amazonaws.com/123456789012/punctual-{q}"
                                     for q in ("delay", "delivery", "rejected"))
        self.settings = self._settings(delay, delivery, rejected, CONTROL_TOPIC_ARN_FAKE)
        aws.op_put_rule(Name=s.rule_name, ScheduleExpression="cron(0 0 1 1 ? 2199)", State="DISABLED")
        self.table_arn_stream = f"arn:aws:dynamodb:{REGION}:123456789012:table/{s.table_name}/stream/bench"
        self.admin_sqs = BenchClient(aws, "sqs")
        self.h_ddb, self.h_sqs, self.h_events = (BenchClient(aws, n) for n in ("dynamodb", "sqs", "events"))
        self.user_ddb = BenchClient(aws, "dynamodb")
        self.esm_sqs = BenchClient(aws, "sqs")
        self.h_sns, self.dest_sns = BenchClient(aws, "sns"), BenchClient(aws, "sns")
        for c in (self.h_ddb, self.h_sqs, self.h_events, self.h_sns):
            self._hook(c, handler=True)
        self._hook(self.user_ddb, handler=False, actor="user")
        self._hook(self.esm_sqs, handler=False, actor="lambda-sqs-poller")
        self._hook(self.dest_sns, handler=False, actor="lambda-destination")

    def _settings(self, delay: str, delivery: str, rejected: str, topic: str) -> Settings:
        """The handlers' Settings: the resources the construct deploys for the run's delivery mode (the
        delay queue in the default mode; in direct delivery the control topic and no delay queue), then
        the run's overrides."""
        from punctual.core.config import Settings

        direct = self.overrides.get("delivery") == "direct"
        return Settings(**{"delay_queue_url": "" if direct else delay, "control_topic_arn": topic if direct else "",
                           "delivery_queue_url": delivery, "rejected_queue_url": rejected, **self.overrides})

    def _handler_deps(self) -> Deps:
        """The handlers' Deps over the recording clients (typed as the boto3 clients they stand in for)."""
        from punctual.core.runtime import Deps

        return Deps(settings=self.settings, clock=self.clock, ddb=cast("DynamoDBClient", self.h_ddb),
                    sqs=cast("SQSClient", self.h_sqs), events=cast("EventBridgeClient", self.h_events),
                    sns=cast("SNSClient", self.h_sns) if self.has_control_topic else None)

    def _setup(self) -> None:
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        from punctual.core.config import Settings

        cfg = Config(signature_version=UNSIGNED, parameter_validation=False, retries={"max_attempts": 1})

        def client(name: str) -> Any:
            return boto3.client(name, region_name=REGION, config=cfg)

        admin_ddb, admin_sqs, admin_events = client("dynamodb"), client("sqs"), client("events")
        topic = client("sns").create_topic(Name=CONTROL_TOPIC)["TopicArn"]
        s = Settings()
        admin_ddb.create_table(
            TableName=s.table_name,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                  {"AttributeName": "sk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
        vt = str(self.m.delay_visibility_ms // 1000)
        delay = admin_sqs.create_queue(QueueName="punctual-delay", Attributes={"VisibilityTimeout": vt})["QueueUrl"]
        delivery = admin_sqs.create_queue(QueueName="punctual-delivery")["QueueUrl"]
        rejected = admin_sqs.create_queue(QueueName="punctual-rejected")["QueueUrl"]
        self.settings = self._settings(delay, delivery, rejected, topic)
        admin_events.put_rule(Name=s.rule_name, ScheduleExpression="cron(0 0 1 1 ? 2199)", State="DISABLED")
        self.table_arn_stream = admin_ddb.describe_table(TableName=s.table_name)["Table"]["LatestStreamArn"]
        self.admin_sqs = admin_sqs

        # Clients: the handlers' (faults, latency), the user's, the Lambda pollers'.
        self.h_ddb, self.h_sqs, self.h_events = client("dynamodb"), client("sqs"), client("events")
        self.user_ddb = client("dynamodb")
        self.esm_sqs = client("sqs")
        self.streams = client("dynamodbstreams")
        self.h_sns, self.dest_sns = client("sns"), client("sns")
        for c in (self.h_ddb, self.h_sqs, self.h_events, self.h_sns):
            self._hook(c, handler=True)
        self._hook(self.user_ddb, handler=False, actor="user")
        self._hook(self.esm_sqs, handler=False, actor="lambda-sqs-poller")
        self._hook(self.dest_sns, handler=False, actor="lambda-destination")
        self._hook(self.streams, handler=False, actor="lambda-stream-poller")
        shard = self.streams.describe_stream(StreamArn=self.table_arn_stream)["StreamDescription"]["Shards"][0]
        self.shard_id = shard["ShardId"]
        self.shard_iter = self.streams.get_shard_iterator(
            StreamArn=self.table_arn_stream, ShardId=self.shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        from moto.dynamodb.models import dynamodb_backends

        self.moto_table = dynamodb_backends["123456789012"][REGION].get_table(s.table_name)

    # ---------------------------------------------------------------- botocore hooks
    def _actor(self, default: str) -> str:
        proc = self.engine.current
        return proc.info.get("fn", default) if proc is not None else default

    def _hook(self, client: Any, handler: bool, actor: str = "") -> None:
        svc = client.meta.service_model.service_name
        ev = client.meta.events

        def params_hook(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            context["bench_params"] = params

        def before(model: Any, context: dict[str, Any], **_: Any) -> None:
            self._sync_time()
            if not handler:
                return
            proc = self.engine.current
            if proc is None:
                return
            lat = self.m.api_latency_ms.get(svc)
            if lat:
                ms = self._u(lat)
                # A call inside a parallel section (punctual.core.parallel, run in order here)
                # overlaps with lanes() - 1 others: it costs that share of its latency.
                ms = max(1, ms // lanes())
                # its client CPU does not overlap (the GIL): charged in full (punctual.bench.cpu)
                ms += self._cpu_ms(proc, request_cpu_ms(f"{svc}.{model.name}", context.get("bench_params") or {},
                                                        self._memory_mb(), self.m.client_cpu_scale))
                self.engine.advance(self.engine.now + ms)
                self._sync_time()
            if svc == "events" and not self.events_quota.admit(model.name, self.engine.now):
                self.result.counters[f"{EVENTS_THROTTLED_PREFIX}{self._actor('?')}:{model.name}"] += 1
                raise throttling_error(model.name)
            for outage in self.outages:
                if outage.covers(model.name, context.get("bench_params") or {}, self.engine.now):
                    self.result.counters["outage_call_failures"] += 1
                    outage.respond(model.name, context.get("bench_params") or {})
            if self.faults_on and self.fault_rng.random() < self.m.fault_call_failure_rate:
                from botocore.exceptions import ClientError

                self.result.counters["injected_call_failures"] += 1
                code = self.fault_rng.choice(["InternalError", "ThrottlingException"])
                raise ClientError({"Error": {"Code": code, "Message": "injected by punctual bench"}}, model.name)

        def after(http_response: Any, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
            op = model.name
            who = self._actor("?") if handler else actor
            self.result.requests[(who, f"{svc}.{op}")] += 1
            ok = getattr(http_response, "status_code", 200) < 300
            params = context.get("bench_params") or {}
            if svc == "dynamodb" and not ok and is_throttled(parsed):
                self.result.counters[f"{THROTTLED_PREFIX}{who}:{op}"] += 1  # refused: no units, no write
            elif svc == "dynamodb":
                self._account_ddb(op, params, parsed)
                if ok and op in WRITE_OPS:
                    self.stream.add(self._stream_new())
            elif svc == "sqs" and ok:
                self._observe_sqs(op, params, parsed)
            elif svc == "events" and ok:
                self._observe_rule(op, params)
            elif svc == "sns" and ok and op == "Publish":
                # SNS bills each 64 KB chunk of a message as a request (punctual.bench.prices)
                chunks = -(-len(str(params.get("Message", "")).encode("utf-8")) // SNS_CHUNK_BYTES)
                self.result.requests[(who, f"{svc}.{op}")] += max(1, chunks) - 1
                self._published(who, params, parsed)
            proc = self.engine.current
            if handler and proc is not None and ok:  # parsing the response's rows (punctual.bench.cpu)
                cpu = self._cpu_ms(proc, response_cpu_ms(f"{svc}.{op}", parsed, self._memory_mb(),
                                                         self.m.client_cpu_scale))
                if cpu:
                    self.engine.advance(self.engine.now + cpu)
                    self._sync_time()
            if handler and self.faults_on and self.engine.current is not None:
                if self.fault_rng.random() < self.m.fault_crash_rate:
                    self.result.counters["injected_crashes"] += 1
                    raise InjectedCrash(f"crash after {svc}.{op}")

        ev.register(f"provide-client-params.{svc}", params_hook)
        ev.register(f"before-call.{svc}", before)
        ev.register(f"after-call.{svc}", after)

    def _memory_mb(self, fn: str | None = None) -> int:
        fn = fn or self._actor("?")
        own = {"consumer": self.m.consumer_memory_mb, "poller": self.m.poller_memory_mb}
        return own.get(fn) or MEMORY_MB.get(fn, 128)

    def _cpu_ms(self, proc: Process, ms: float) -> int:
        """The whole ms of client CPU ``proc`` spends now (the fraction is carried to its next call),
        counted per function in µs (counter ``client_cpu_us:<fn>``)."""
        if ms <= 0:
            return 0
        self.result.counters[f"client_cpu_us:{proc.info.get('fn', '?')}"] += round(ms * 1000)
        whole, proc.info["cpu_carry"] = whole_ms(proc.info.get("cpu_carry", 0.0), ms)
        return whole

    def _account_ddb(self, op: str, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        r = self.result
        if op in ("PutItem", "UpdateItem", "DeleteItem"):
            r.ddb_wru += 1
        elif op == "BatchWriteItem":  # items over a partition's limit come back unprocessed, unbilled
            r.ddb_wru += sum(len(v) for v in (params.get("RequestItems") or {}).values())
            unprocessed = sum(len(v) for v in (parsed.get("UnprocessedItems") or {}).values())
            r.ddb_wru -= unprocessed
            if unprocessed:
                r.counters["ddb_unprocessed_items"] += unprocessed
        elif op == "TransactWriteItems":
            r.ddb_wru += transact_write_units(params)
        elif op == "GetItem":
            r.ddb_rru += get_read_units(bool(params.get("ConsistentRead")))
        elif op == "BatchGetItem":
            r.ddb_rru += sum(len(v.get("Keys", [])) for v in (params.get("RequestItems") or {}).values())
        elif op == "Query":
            r.ddb_rru += query_read_units(parsed.get("Items", []), bool(params.get("ConsistentRead")))

    # ---------------------------------------------------------------- SQS: sends observed
    def _observe_sqs(self, op: str, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        url = params.get("QueueUrl")
        proc = self.engine.current
        if op in ("SendMessageBatch", "SendMessage"):
            if op == "SendMessage":
                entries = [dict(params, Id="0")]
                ok = {"0": parsed.get("MessageId")}
            else:
                entries = params.get("Entries", [])
                ok = {e["Id"]: e.get("MessageId") for e in parsed.get("Successful", [])}
            sent = [e for e in entries if e["Id"] in ok]
            if proc is not None:
                proc.info["sent"] = proc.info.get("sent", 0) + len(sent)
            if url == self.settings.delivery_queue_url:
                for e in sent:
                    visible = self._delivery_visible_ms(e)
                    body = json.loads(e["MessageBody"])
                    i = self.sk_index.get(body.get("key"))
                    if i is not None:
                        self.result.deliveries.setdefault(i, []).append(visible - EPOCH_MS)
            elif url == self.settings.delay_queue_url and not self.has_delay_queue:
                # No delay queue deployed (its URL unset): the handlers should send nothing there; counted
                # to show it if they do, never received.
                self.result.counters["sends_without_delay_queue"] += len(sent)
            elif url == self.settings.delay_queue_url:
                for e in sent:
                    visible = self.engine.now + int(e.get("DelaySeconds", 0)) * 1000
                    if self.faults_on and self.fault_rng.random() < self.m.fault_call_failure_rate / 10:
                        self.lost_message_ids.add(ok[e["Id"]])  # SQS loses it: nobody will receive it
                        self.result.counters["injected_lost_messages"] += 1
                    early = self.rng.randint(0, self.m.sqs_early_max_ms)
                    pick_up = self.m.sqs_poll_latency_ms.sample(self.rng)
                    self.queue.schedule(max(self.engine.now, visible - early) + pick_up, visible)
        elif op == "ChangeMessageVisibility" and url == self.settings.delay_queue_url:
            back = self.engine.now + int(params.get("VisibilityTimeout", 0)) * 1000
            self.queue.schedule(back + self.m.sqs_poll_latency_ms.sample(self.rng), back)

    def _delivery_visible_ms(self, entry: dict[str, Any]) -> int:
        """When a message sent now to the delivery queue becomes visible to the user's consumers: its
        delivery time. The consumer sends at the due ms with no delay: at once. Direct mode sends with
        DelaySeconds: when they end (the documented on-time model), or up to ``sqs_early_max_ms``
        before under the early reading, drawn as for the delay queue (never before the send)."""
        delay_s = int(entry.get("DelaySeconds") or 0)
        if delay_s <= 0:
            return self.engine.now  # no draw: a run without delays keeps its random sequence
        visible = self.engine.now + delay_s * 1000
        early = self.rng.randint(0, self.m.sqs_early_max_ms)
        return max(self.engine.now, visible - early)

    # ---------------------------------------------------------------- Lambda invocations
    def _invoke(self, fn: str, t_ms: int, body: Any, on_done: Any) -> None:
        """Start ``fn`` at ``t_ms`` in a warm environment if one is free, else after a cold start (a
        new environment: new Deps, so its handler sees a cold start). ``body(context, deps)`` runs with
        a Lambda context (the function's timeout: the invocation's deadline) and the environment's Deps."""
        pool = self.warm[fn]
        pool[:] = [env for env in pool if t_ms <= env.kept_until_ms]
        env = next((e for e in pool if e.free_ms <= t_ms), None)
        cold = env is None
        if env is None:
            env = _Environment(t_ms, self._handler_deps())
        else:
            pool.remove(env)
        start = t_ms + (0 if not cold else self.m.cold_start_ms.sample(self.rng))
        init_ms = start - t_ms

        def done(proc: Process) -> None:
            env.free_ms = proc.ended_ms
            env.kept_until_ms = env.free_ms + self.m.warm_idle_ms.sample(self.rng)
            self.warm[fn].append(env)
            if proc.ended_ms - proc.started_ms > TIMEOUT_S.get(fn, 900) * 1000:
                self.result.counters[f"past_timeout:{fn}"] += 1
            err = None
            if proc.error is not None:
                err = type(proc.error).__name__
                if not isinstance(proc.error, InjectedCrash):
                    self.result.counters[f"handler_error:{fn}:{type(proc.error).__name__}:{str(proc.error)[:80]}"] += 1
            self.result.invocations.append(
                Invocation(fn, start - EPOCH_MS, proc.ended_ms - proc.started_ms + init_ms, cold,
                           proc.info.get("sent", 0), err, self._memory_mb(fn)))
            on_done(proc)

        def run() -> Any:
            proc = self.engine.current
            assert proc is not None  # the engine runs run() as the current process
            proc.info["fn"] = fn
            self.running[fn] += 1
            self.invocations_started += 1
            context = SimContext(fn, str(uuid.UUID(int=self.invocations_started)), TIMEOUT_S.get(fn, 900) * 1000)
            try:
                return body(context, env.deps)
            finally:
                self.running[fn] -= 1

        self.engine.spawn(start, run, fn, done)

    # ---------------------------------------------------------------- the rule: definitions observed
    def _observe_rule(self, op: str, params: dict[str, Any]) -> None:
        if op == "PutRule":
            self.rule.observe(params.get("ScheduleExpression"), params.get("State", "ENABLED"))
        elif op in ("DisableRule", "DeleteRule"):
            self.rule.disabled()

    # ---------------------------------------------------------------- the stream: new records
    def _stream_new(self) -> list[dict[str, Any]]:
        """The table's stream records written since the last call, in order.

        They are read from the backend directly (for moto, the same JSON the dynamodbstreams
        client returns, minus ~30 ms of response serialisation per call), then forgotten: moto
        keeps every record forever, the real stream 24 h."""
        if self.backend == "fake":
            raw = self.aws.stream[:]
            del self.aws.stream[:]
            return raw
        shard = self.moto_table.stream_shard
        assert shard is not None  # _setup creates the table with a stream
        take = shard.items[:]
        del shard.items[:]
        shard.starting_sequence_number += len(take)
        return [item.to_json() for item in take]

    # ---------------------------------------------------------------- the workload
    def _insert(self, i: int, attempt: int = 1) -> None:
        from botocore.exceptions import ClientError

        from punctual.core.keys import encode_sk

        task_id = f"t{i:07d}"
        sk = encode_sk(EPOCH_MS + self.sc.dues[i], task_id)
        self.sk_index[sk] = i
        if self.running["poller"] and attempt == 1:
            self.result.counters["inserts_during_a_poll"] += 1
        try:
            self.user_ddb.put_item(TableName=self.settings.table_name, Item={
                "pk": {"S": self.settings.partition_for(task_id)}, "sk": {"S": sk},
                "payload": {"M": {"task": {"N": str(i)}, "kind": {"S": "bench"}}},
            })
        except ClientError as exc:
            if not is_throttled(exc.response):
                raise
            self._retry_insert(i, attempt)

    def _retry_insert(self, i: int, attempt: int) -> None:
        """The producer's SDK retries a throttled put (botocore's DynamoDB policy: models.SOURCES
        "sdk_retry_base_ms"); past its attempts the producer retries at the last delay."""
        m = self.m
        if attempt == 1:
            self.result.counters["user_puts_throttled"] += 1
        if attempt == m.sdk_max_attempts:
            self.result.counters["user_puts_past_sdk_attempts"] += 1
        delay = m.sdk_retry_base_ms * 2 ** (min(attempt, m.sdk_max_attempts - 1) - 1)
        self.engine.at(self.engine.now + delay, partial(self._insert, i, attempt + 1))

    def _housekeeping(self) -> None:
        """Empty the delivery queue now and then (nobody reads it; moto scans it on every send)."""
        self.admin_sqs.purge_queue(QueueUrl=self.settings.delivery_queue_url)
        if self.engine.now - EPOCH_MS < self.sc.horizon_ms:
            self.engine.at(self.engine.now + 3_600_000, self._housekeeping)

    # ---------------------------------------------------------------- run
    def _outage(self, service: str, start_ms: int, end_ms: int) -> Outage:
        """One of the scenario's outages. Direct delivery has no delay queue: its control channel, the SNS
        topic, is out in that slot instead (every Publish fails, Lambda's OnFailure records too:
        :meth:`_on_failure_destination`)."""
        if service == "delay queue" and self.has_control_topic:
            service = "control topic"
        queues = {"delay": self.settings.delay_queue_url, "delivery": self.settings.delivery_queue_url}
        return service_outage(service, start_ms, end_ms, queues)

    def _count_outage_lateness(self) -> None:
        """The faults scenario's outages: the worst first delivery measured against the promise
        (scenarios.after_recovery_ms), and how many broke it (over 2 minutes)."""
        lead = self.settings.lead_ms
        worst = broken = 0
        for i, times in self.result.deliveries.items():
            late = after_recovery_ms(self.sc.dues[i], min(times), self.outage_plan, lead)
            worst = max(worst, late)
            broken += late > 120_000
        self.result.counters["outage_max_late_after_recovery_ms"] = worst
        self.result.counters["outage_promise_broken"] = broken

    def run(self) -> RunResult:
        import time as _time

        from freezegun import freeze_time

        from punctual.core import observability as obs

        os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
        wall = _time.perf_counter()
        sink = _LogSink()
        fake = self.backend == "fake"
        with freeze_time(datetime.fromtimestamp(EPOCH_MS / 1000, tz=UTC)) as frozen, \
                (contextlib.nullcontext() if fake else _mock_aws()), run_in_order():
            self.frozen = frozen
            patches = [] if fake else self._moto_speedups()
            obs.set_stream(sink)
            try:
                if fake:
                    self._setup_fake()
                else:
                    self._setup()
                self.outages = [self._outage(service, EPOCH_MS + start, EPOCH_MS + end)
                                for service, start, end in self.outage_plan]
                for i in self.sc.order():
                    self.engine.at(EPOCH_MS + self.sc.inserts[i], partial(self._insert, i))
                self.engine.at(EPOCH_MS + 3_600_000, self._housekeeping)
                self.engine.run(EPOCH_MS + self.sc.horizon_ms)
            finally:
                obs.set_stream(None)
                for obj, name, old in reversed(patches):
                    setattr(obj, name, old)
        self.result.log_bytes = sink.bytes
        self.result.self_measured = dict(sink.measured)
        self.result.metrics_emitted = sorted(f"{name} {dict(dims)}" for _, name, dims in sink.metrics)
        self.result.fixed_monthly = fixed_monthly(self.has_control_topic, len(sink.metrics), self.m.esm_idle_pollers,
                                                  self.m.esm_idle_wait_s)
        self.result.counters["engine_events"] = self.engine.events_run
        if self.outage_plan:
            self._count_outage_lateness()
        # Lambda's SQS event source long-polls the idle delay queue: billed receives (punctual.bench.billing).
        # Direct delivery deploys no delay queue (its control channel, the SNS topic, pushes): nothing to bill.
        if self.has_delay_queue:
            self.result.requests[("lambda-sqs-poller", IDLE_RECEIVE_API)] = idle_receives(
                self.sc.horizon_ms, self.m.esm_idle_pollers, self.m.esm_idle_wait_s)
        self.result.wall_s = _real_elapsed(wall)
        return self.result


def lambda_handler(fn: str) -> Callable[..., Any]:
    """Function ``fn``'s Lambda handler as the wheel ships it (``punctual.functions.<fn>.handler``,
    the very code Lambda runs)."""
    return cast("Callable[..., Any]", importlib.import_module(f"punctual.functions.{fn}.handler").handler)


def _mock_aws() -> Any:
    """moto's in-process AWS, imported only by the moto backend."""
    from moto import mock_aws

    return mock_aws()


def _orig_ms(dt: Any) -> float:
    from moto.core.utils import unix_time_millis

    return unix_time_millis(dt)


def _orig_s(dt: Any) -> float:
    from moto.core.utils import unix_time

    return unix_time(dt)


def _real_elapsed(start: float) -> float:
    """perf_counter is frozen by freezegun inside the run; outside it is real again."""
    import time as _time

    return _time.perf_counter() - start
