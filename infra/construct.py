"""The ``Scheduler`` construct: table, queues, the one rule and the three functions (two and a
control topic with ``delivery="direct"``).

Follows the aws-cdk DESIGN_GUIDELINES: ``Scheduler(scope, id, *, **props)`` with flat
props whose units are in their names, documented defaults, the L2 resources exposed as
attributes, ``grant_*`` returning :class:`aws_iam.Grant` and ``metric_*`` helpers.

Names shared with the functions are never spelled twice: environment variables come
from :data:`punctual.core.config.ENV` (via ``to_environment``), the rule description
from :data:`punctual.core.config.RULE_DESCRIPTION`, metric names from
:mod:`punctual.core.metrics_names`.

The constructor reads as a table of contents: the props are checked in one place
(``infra/_props.py``), then one private builder per resource family makes the resources, in the
order below; the metrics, alarms and dashboard are the base class's (``infra/_observability.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from aws_cdk import Acknowledgment, Duration, Names, RemovalPolicy, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import custom_resources as cr
from constructs import Construct, IConstruct

from punctual.core.config import ATTR_EXPIRES, ENV, META_PK, RULE_DESCRIPTION, Settings, to_environment
from punctual.core.cron import one_shot_cron
from punctual.core.stream_filter import EDITOR_STREAM_FILTERS
from punctual.deployment import (
    CONSUMER_TIMEOUT_S,
    DELAY_MAX_RECEIVE_COUNT,
    DELAY_QUEUE_VISIBILITY_S,
    EDITOR_MAX_RECORD_AGE_S,
    EDITOR_RETRY_ATTEMPTS,
    EDITOR_TIMEOUT_S,
    POLLER_MAX_EVENT_AGE_S,
    POLLER_RETRY_ATTEMPTS,
    POLLER_TIMEOUT_S,
)

# (the names below moved to ._observability and ._props are re-exported: importable from here as before)
from ._observability import DEAD_LETTER_WHAT as DEAD_LETTER_WHAT
from ._observability import DEAD_LETTER_WHAT_DIRECT as DEAD_LETTER_WHAT_DIRECT
from ._observability import METRIC_PERIOD as METRIC_PERIOD
from ._observability import SchedulerObservability
from ._props import DEFAULT_DELAY_QUEUE_AGE_ALARM_THRESHOLD as DEFAULT_DELAY_QUEUE_AGE_ALARM_THRESHOLD
from ._props import DEFAULT_LATENESS_ALARM_THRESHOLD as DEFAULT_LATENESS_ALARM_THRESHOLD
from ._props import DEFAULTS as DEFAULTS
from ._props import DEPRECATED_INT_PROPS as DEPRECATED_INT_PROPS
from ._props import DURATION_PROPS as DURATION_PROPS
from ._props import MAX_INSTANCE_NAME as MAX_INSTANCE_NAME
from ._props import TABLE_KEYS as TABLE_KEYS
from ._props import TABLE_STREAM_VIEW as TABLE_STREAM_VIEW
from ._props import validate_props
from .bundling import functions_code

# The rule is created disabled with this schedule; the functions re-arm it with PutRule.
# 2199-12-31T23:59Z: the last minute EventBridge accepts, so it can never fire by accident.
PLACEHOLDER_MINUTE_MS = 7_258_118_340_000
PLACEHOLDER_SCHEDULE = one_shot_cron(PLACEHOLDER_MINUTE_MS)

# The payload's "source" when a deployment invokes the poller (see Scheduler._resync_after_rule_changes).
RESYNC_SOURCE = "punctual.deploy"

POLLER_HANDLER = "punctual.functions.poller.handler.handler"
CONSUMER_HANDLER = "punctual.functions.consumer.handler.handler"
EDITOR_HANDLER = "punctual.functions.editor.handler.handler"

# Sizing (see docs/construct.md, "Sizing"):
# - poller: one poll may read, validate and claim a whole 15-minute window (tens of
#   thousands of rows, ~2 DynamoDB writes each, 16 send workers): 5 minutes, 1024 MB
#   (CPU scales with memory; pydantic validation is CPU bound).
# - consumer: a batch of 10 pointers, each may wait in-process up to max_wait_ms (2 s)
#   before delivery; 30 s leaves room for retries with backoff, and keeps the delay queue's
#   visibility timeout (6 x 30 s = 180 s) below the default orphan grace (300 s), so a
#   message that failed once comes back before its row is taken for an orphan and resent.
#   512 MB for a fast cold start, which is lateness.
# - editor: a stream batch of up to 100 records, a few calls each: 20 s (punctual/deployment.py), 512 MB.
POLLER_TIMEOUT = Duration.seconds(POLLER_TIMEOUT_S)
POLLER_MEMORY_MB = 1024
POLLER_MAX_EVENT_AGE = Duration.seconds(POLLER_MAX_EVENT_AGE_S)
CONSUMER_TIMEOUT = Duration.seconds(CONSUMER_TIMEOUT_S)
CONSUMER_MEMORY_MB = 512
EDITOR_TIMEOUT = Duration.seconds(EDITOR_TIMEOUT_S)
EDITOR_MEMORY_MB = 512
DELAY_QUEUE_VISIBILITY = Duration.seconds(DELAY_QUEUE_VISIBILITY_S)
DELIVERY_MAX_RECEIVE_COUNT = 5
EDITOR_BATCH_SIZE = 100
# Batches the stream mapping runs at once per stream shard (ParallelizationFactor, at most 10),
# in order per partition key: with shards > 1 the shards' inserts are edited side by side
# (editors already run concurrently with each other and with polls: docs/architecture.md).
EDITOR_PARALLELIZATION = 10
RULE_TARGET_RETRY_ATTEMPTS = 8
RULE_TARGET_MAX_EVENT_AGE = Duration.hours(1)
DLQ_RETENTION = Duration.days(14)
# The control topic's key when no encryption_key is given: the AWS managed SNS key (cdk-nag SNS2).
# Its key policy lets any principal of the account use it through SNS, so the functions' roles
# (Lambda destinations, the stream's OnFailure and request_poll publish as the function) need only
# sns:Publish.
AWS_MANAGED_SNS_KEY = "alias/aws/sns"
DELAY_RETENTION = Duration.days(4)  # pointers live <= 15 min + retries; a DLQ keeps the failures
DELIVERY_RETENTION = Duration.days(14)  # consumers may be down for a long weekend

# Exactly the API calls each function makes (handlers + punctual/core store, arming, queues and the use cases).
# poller: query_below/query_from, read_arm (GetItem), claim/release/arm (UpdateItem), reject_row/delete (DeleteItem).
# editor: get_row/read_arm (GetItem), claim/release/arm (UpdateItem), reject_row (DeleteItem).
POLLER_TABLE_ACTIONS = ("dynamodb:Query", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# UpdateItem: the fence of a run's due seconds (store.fence_second), a row's orphan clock restarted
# after a failed send (store.restart_orphan_clock), and arming a poll asked for (usecases/ensure_poll:
# the meta row); Query: the run's rows (store.rows_between); GetItem: the meta row read back
# (arming.sync_rule); DeleteItem: rows after their sends, a conditional delete each
# (store.delete_sent), or after rejecting one (store.reject_row).
CONSUMER_TABLE_ACTIONS = ("dynamodb:Query", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
EDITOR_TABLE_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
# DescribeRule: before relying on the rule (editor) or re-putting a minute that has begun
# (arming.apply_rule), the code checks what the rule holds.
RULE_ACTIONS = ("events:PutRule", "events:DisableRule", "events:DescribeRule")
SEND_ACTIONS = ("sqs:SendMessage",)  # SendMessageBatch is authorised by sqs:SendMessage
# Direct delivery: poll requests (ensure_poll.request_poll), published to the control topic.
PUBLISH_ACTIONS = ("sns:Publish",)
# The poller reads the delay queue's visible-message count before resending orphans
# (a backlog means the consumer is behind, not that messages were lost).
BACKLOG_ACTIONS = ("sqs:GetQueueAttributes",)
# What a producer needs for raw writes and for the editor's client (schedule, schedule_many,
# get, list, cancel = TransactWriteItems of a Delete and a ConditionCheck of the delivery fence,
# reschedule = a Delete, a Put and that ConditionCheck).
SCHEDULE_ACTIONS = (
    "dynamodb:PutItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:Query",
    "dynamodb:ConditionCheckItem",
)
# cancel and reschedule check, in their transaction, that the delivery fence of the task's due second
# is absent (store.fence_second): a ConditionCheck on the meta partition, which reads nothing back
# and writes nothing (the producer's only action there).
FENCE_CHECK_ACTIONS = ("dynamodb:ConditionCheckItem",)


# Lambda stops a function invoked in a loop through SQS or SNS after about 16 rounds, by default
# (Lambda developer guide, "Use Lambda recursive loop detection to prevent infinite loops"; boto3
# issue #3899: a function re-sending to its own delay queue stopped after 16). A poll request asked
# again while the rule or the table fails is such a loop by design (docs/architecture.md, "When arming
# fails"): every 20 s, it would be dropped after ~5 minutes of an outage. Each round waits (20 s, or
# Lambda's retries), and it ends when arming succeeds.
RECURSION_ALLOWED = {"recursive_loop": lambda_.RecursiveLoop.ALLOW}

class Scheduler(SchedulerObservability):
    """Precision one-off task scheduler: put a row in :attr:`table`, get an event on :attr:`delivery_queue`.

    :param partition_key_value: ``pk`` of every task row (cdk-scheduler's ``partitionKeyValue``).
        Default: ``"scheduler"``.
    :param shards: spread the tasks over this many partitions (1..64), for more than one
        partition's ~330 tasks a second (docs/planning.md, "One partition's ceiling"). With N > 1 a
        task's ``pk`` is ``"<partition_key_value>#<crc32(id) mod N>"`` (README, "Shards"); the
        poller reads every shard and the bare ``partition_key_value``. Raise it, never lower it
        (rows in a removed shard would no longer be read). Default: 1 (every row under
        ``partition_key_value``, cdk-scheduler's row format).
    :param window: one poll sends every task due within this long of its start; whole seconds,
        60 s..15 min and >= ``lead`` + 60 s. Default: 15 minutes (the SQS DelaySeconds maximum).
    :param lead: the rule is armed this long before the next unsent task is due (covers
        EventBridge firing anywhere in its minute, the Lambda start and the poll claiming tens of
        thousands of rows due together before the first is due). Default: 5 minutes; 10 minutes
        with ``delivery="direct"`` (its poll also sends and deletes each row).
    :param orphan_grace: a sent row still present this long after it should have been
        delivered is sent again; more than the delay queue's visibility timeout (3 min).
        Default: 5 minutes.
    :param table: bring an existing table instead of creating one (e.g. a cdk-scheduler user's,
        rows and all): ``pk``/``sk`` string keys and a ``NEW_AND_OLD_IMAGES`` stream (an imported
        table: ``Table.from_table_attributes(..., table_stream_arn=...)``). Punctual then sets none
        of its properties (removal policy, encryption, point-in-time recovery are the owner's).
        Default: a new table (on-demand, stream, point-in-time recovery).
    :param delivery_queue: the public queue events are delivered to. Default: a new standard
        queue (SSE, enforce SSL, visibility 5 min, retention 14 days) with a dead-letter queue
        after 5 receives.
    :param removal_policy: what happens to the table (and created queues) when removed from the
        stack. Default: ``RemovalPolicy.RETAIN`` (pending tasks are data).
    :param encryption_key: customer managed KMS key for the table and the queues this construct
        creates. Default: none: the table uses the AWS owned/managed DynamoDB key, the queues SSE-SQS.
    :param log_retention: retention of the functions' log groups. Default: one month.
    :param alarms: create CloudWatch alarms (DLQ depth, function errors, lateness p99, rejected rows;
        no actions: add them via :attr:`alarms`). Default: True.
    :param lateness_alarm_threshold: p99 delivery lateness that raises the lateness alarm.
        Default: 1 second.
    :param delay_queue_age_alarm_threshold: age of the delay queue's oldest message that raises
        the delay-queue alarm (a consumer that is failing or not receiving); more than ``window``
        + the queue's visibility timeout, as pointers wait there up to ``window`` by design.
        Not used with ``delivery="direct"`` (no delay queue). Default: 20 minutes.
    :param dashboard: create a CloudWatch dashboard of this scheduler (lateness, deliveries, the
        delay queue, dead letters and rejected rows, the functions, the alarms). Default: False.
    :param architecture: Lambda architecture (the bundled wheels follow it). Default: ARM_64.
    :param runtime: Lambda Python runtime (3.12+; the bundled wheels follow it). Default: PYTHON_3_13.
    :param poller_reserved_concurrency: reserved concurrency of the poller, or None for none.
        Default: None (a reservation fails to deploy in accounts with the default concurrency
        quota of 10). One poll at a time is guaranteed by the poller's lease in the meta row, not
        by this; reserving only keeps a poll able to run when other functions exhaust the
        account's concurrency.
    :param consumer_max_concurrency: maximum concurrent consumer invocations for the delay queue,
        or None for the SQS event source's default scaling. Not used with ``delivery="direct"``
        (no consumer). Default: None.
    :param max_attempts: sends of one row before it is rejected as undeliverable. Default: 5.
    :param log_payloads: log task payloads (never on by default: payloads are data). Default: False.
    :param metrics_namespace: CloudWatch namespace of the EMF metrics. Default: ``"Punctual"``.
    :param instance_name: value of the ``Instance`` dimension every metric of this scheduler carries
        (functions' ``PUNCTUAL_INSTANCE_NAME``), so that schedulers sharing an account and namespace
        keep their metrics and alarms apart. Default: a stable name unique to this construct
        (``Names.unique_resource_name``, its path in the app; it changes if the construct moves).
    :param window_seconds: deprecated alias of ``window`` (an int of seconds).
    :param lead_seconds: deprecated alias of ``lead``.
    :param orphan_grace_seconds: deprecated alias of ``orphan_grace``.
    :param lateness_alarm_threshold_ms: deprecated alias of ``lateness_alarm_threshold`` (an int of ms).
    :param event_format: body of the delivered events: ``"punctual"`` (README, "The delivered event")
        or ``"cdk-scheduler"`` (``{"publicationTimestamp", "payload" as DynamoDB JSON}``, what
        cdk-scheduler consumers read; docs/migrating.md). Default: ``"punctual"``.
    :param delivery: how tasks reach the delivery queue. ``"consumer"``: a delay-queue pointer
        and the consumer deliver each task on its due millisecond, cancellable until then.
        ``"direct"``: the poller and the editor send each task's event to the delivery queue
        themselves, with ``DelaySeconds``, visible at its due time or up to 100 ms after; a task
        is cancellable until it is sent, up to ``window`` before due, then ``cancel`` answers
        ``AlreadyEnqueued`` (docs/architecture.md, "Direct delivery"). Direct delivery deploys no
        delay queue and no consumer (:attr:`delay_queue`, :attr:`delay_dead_letter_queue` and
        :attr:`consumer_function` are None): poll requests and the poller's and the stream's
        failure notices go through an SNS topic, :attr:`control_topic`, served by the poller.
        Default: ``"consumer"``.
    :param resync_on_deploy: invoke the poller once after a deployment that creates or changes the
        rule (CloudFormation puts it back DISABLED; the poll re-arms it from the meta row). Adds
        an ``AwsCustomResource`` (a Node.js function run at deploy time only; its log group keeps
        ``log_retention``). Default: True.
    :param tracing: AWS X-Ray tracing of the three functions (``lambda_.Tracing.ACTIVE``: Lambda
        records each invocation's segment; the functions add no subsegments; their roles get
        ``xray:PutTraceSegments``/``xray:PutTelemetryRecords``, which have no resource-level
        permissions). Default: None (CloudFormation's default: not traced).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        partition_key_value: str = "scheduler",
        shards: int = 1,
        window: Duration | None = None,
        lead: Duration | None = None,
        orphan_grace: Duration | None = None,
        table: dynamodb.ITable | None = None,
        delivery_queue: sqs.IQueue | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        encryption_key: kms.IKey | None = None,
        log_retention: logs.RetentionDays = logs.RetentionDays.ONE_MONTH,
        alarms: bool = True,
        lateness_alarm_threshold: Duration | None = None,
        delay_queue_age_alarm_threshold: Duration | None = None,
        dashboard: bool = False,
        architecture: lambda_.Architecture = lambda_.Architecture.ARM_64,
        runtime: lambda_.Runtime = lambda_.Runtime.PYTHON_3_13,
        poller_reserved_concurrency: int | None = None,
        consumer_max_concurrency: int | None = None,
        max_attempts: int = 5,
        log_payloads: bool = False,
        metrics_namespace: str = "Punctual",
        instance_name: str | None = None,
        event_format: str = "punctual",
        delivery: str = "consumer",
        resync_on_deploy: bool = True,
        tracing: lambda_.Tracing | None = None,
        window_seconds: int | None = None,
        lead_seconds: int | None = None,
        orphan_grace_seconds: int | None = None,
        lateness_alarm_threshold_ms: int | None = None,
    ) -> None:
        super().__init__(scope, id)
        # ---- props: every check, in one place (infra/_props.py) --------------------------------------
        props = validate_props(
            self, partition_key_value=partition_key_value, shards=shards, window=window, lead=lead,
            orphan_grace=orphan_grace, lateness_alarm_threshold=lateness_alarm_threshold,
            delay_queue_age_alarm_threshold=delay_queue_age_alarm_threshold, max_attempts=max_attempts,
            log_payloads=log_payloads, metrics_namespace=metrics_namespace, instance_name=instance_name,
            event_format=event_format, delivery=delivery, table=table,
            deprecated={"window_seconds": window_seconds, "lead_seconds": lead_seconds,
                        "orphan_grace_seconds": orphan_grace_seconds,
                        "lateness_alarm_threshold_ms": lateness_alarm_threshold_ms},
        )
        direct = props.settings.direct
        self.partition_key_value = partition_key_value
        self.shards = shards
        # every pk a task may have: the bare value and, sharded, each shard's (core/shards.py)
        self.partitions: tuple[str, ...] = props.settings.partitions
        self.metrics_namespace = metrics_namespace
        self.instance_name = props.settings.instance_name
        self.encryption_key = encryption_key
        self.log_retention = log_retention
        self.removal_policy = removal_policy
        self.tracing = tracing

        # ---- resources, one builder per family -------------------------------------------------------
        self.table: dynamodb.ITable = table if table is not None else self._build_table()
        self.delay_queue, self.delay_dead_letter_queue = (None, None) if direct else self._build_delay_queue()
        self.delivery_queue, self.dead_letter_queue = self._build_delivery_queue(delivery_queue)
        # Invariant 3: a malformed row is moved here (reason + the row as DynamoDB JSON).
        self.rejected_queue = self._queue("RejectedQueue", retention_period=DLQ_RETENTION)
        # Rule -> poller invocations that failed after every retry.
        self.rule_dead_letter_queue = self._queue("RuleDeadLetterQueue", retention_period=DLQ_RETENTION)
        self.control_topic = self._build_control_topic() if direct else None
        # the rule's name is known before the rule: the poller's environment needs it, while the
        # rule's target needs the poller (a Ref would be a cycle)
        rule_name = Names.unique_resource_name(self, max_length=59, separator="-") + "-poll"
        self.settings = self._function_settings(props.settings, rule_name)
        self.poller_function, self.consumer_function, self.editor_function = \
            self._build_functions(architecture, runtime, poller_reserved_concurrency)
        self.rule = self._build_rule(rule_name)
        self._connect_event_sources(consumer_max_concurrency)
        self._grant_permissions(rule_name)

        # ---- observability (infra/_observability.py) -------------------------------------------------
        self.alarms = self._create_alarms(props.lateness_alarm_threshold_ms,
                                          props.delay_queue_age_alarm_threshold) if alarms else []
        self.dashboard = self._create_dashboard() if dashboard else None

        # ---- deployments that reset the rule, compliance ---------------------------------------------
        self.resync = self._resync_after_rule_changes(rule_name) if resync_on_deploy else None
        self._acknowledge_nag_findings()

    # ---- table and queues ----------------------------------------------------------------------------
    def _build_table(self) -> dynamodb.Table:
        """The task table: on-demand, a stream with new and old images, point-in-time recovery."""
        return dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name="sk", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            stream=dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED
            if self.encryption_key
            else dynamodb.TableEncryption.AWS_MANAGED,
            encryption_key=self.encryption_key,
            removal_policy=self.removal_policy,
            # the consumer's delivery fences (meta partition) expire a day after their second
            time_to_live_attribute=ATTR_EXPIRES,
        )

    def _queue(self, cid: str, **kw) -> sqs.Queue:
        """A queue of this construct's: SSL only, encrypted (the customer key, else SSE-SQS)."""
        enc = (
            dict(encryption=sqs.QueueEncryption.KMS, encryption_master_key=self.encryption_key)
            if self.encryption_key
            else dict(encryption=sqs.QueueEncryption.SQS_MANAGED)
        )
        return sqs.Queue(self, cid, enforce_ssl=True, removal_policy=self.removal_policy, **enc, **kw)

    def _build_delay_queue(self) -> tuple[sqs.Queue, sqs.Queue]:
        """The delay queue and its dead-letter queue. Internal: pointer messages (pk, sk, due) with
        DelaySeconds; standard (FIFO rejects per-message delays). Only the functions use it."""
        dead_letters = self._queue("DelayDeadLetterQueue", retention_period=DLQ_RETENTION)
        queue = self._queue(
            "DelayQueue",
            visibility_timeout=DELAY_QUEUE_VISIBILITY,
            retention_period=DELAY_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(queue=dead_letters, max_receive_count=DELAY_MAX_RECEIVE_COUNT),
        )
        return queue, dead_letters

    def _build_delivery_queue(self, brought: sqs.IQueue | None) -> tuple[sqs.IQueue, sqs.IQueue | None]:
        """The public delivery queue and its dead-letter queue: the one brought (its dead letters are its
        owner's), else a new one."""
        if brought is not None:
            return brought, None
        dead_letters = self._queue("DeliveryDeadLetterQueue", retention_period=DLQ_RETENTION)
        queue = self._queue(
            "DeliveryQueue",
            # room for a Lambda consumer with a timeout up to 50 s (6x rule)
            visibility_timeout=Duration.minutes(5),
            retention_period=DELIVERY_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(queue=dead_letters, max_receive_count=DELIVERY_MAX_RECEIVE_COUNT),
        )
        return queue, dead_letters

    def _build_control_topic(self) -> sns.Topic:
        """Direct delivery's control topic, served by the poller.

        The OnFailure destination of the poller's invocations and of the editor's stream is the delay
        queue: its consumer arms a poll for the rows behind a failure (docs/architecture.md, "When
        arming fails"), logs it and counts it (FunctionFailures, its alarm). In direct delivery it is
        this topic instead, which also carries the poll requests: the poller is subscribed and serves
        them the same way (core/usecases/serve_controls.py). Nothing idles: SNS bills what is
        published, where an SQS event source long-polls.
        """
        return sns.Topic(
            self,
            "ControlTopic",
            # encrypted at rest (cdk-nag SNS2): the customer key, else the AWS managed SNS key
            master_key=self.encryption_key or kms.Alias.from_alias_name(self, "ControlTopicKey", AWS_MANAGED_SNS_KEY),
            enforce_ssl=True,
        )

    # ---- functions and the rule ----------------------------------------------------------------------
    def _function_settings(self, base: Settings, rule_name: str) -> Settings:
        """The functions' settings: the checked props and the names of the resources."""
        return replace(
            base,
            table_name=self.table.table_name,
            delay_queue_url=self.delay_queue.queue_url if self.delay_queue is not None else "",
            control_topic_arn=self.control_topic.topic_arn if self.control_topic is not None else "",
            delivery_queue_url=self.delivery_queue.queue_url,
            rejected_queue_url=self.rejected_queue.queue_url,
            rule_name=rule_name,
        )

    def _build_functions(
        self, architecture: lambda_.Architecture, runtime: lambda_.Runtime, poller_reserved_concurrency: int | None,
    ) -> tuple[lambda_.Function, lambda_.Function | None, lambda_.Function]:
        """The poller, the consumer (None in direct delivery) and the editor, from one asset."""
        direct = self.control_topic is not None
        environment = to_environment(self.settings)
        if direct:  # no delay queue: its variable is left out, not set blank (the control topic replaces it)
            del environment[ENV["delay_queue_url"]]
        # wheels fetched now if this synth bundles the stack: a synth that cannot get them stops here
        # with one AssetBuildError instead of failing inside CDK's bundling callback
        shared = dict(code=functions_code(architecture, runtime, bundle=Stack.of(self).bundling_required),
                      runtime=runtime, architecture=architecture, environment=environment)
        # the poller's failed invocations: to the delay queue (the consumer serves them), in direct delivery
        # to the control topic (the poller does; _build_control_topic)
        on_failure: lambda_.IDestination = destinations.SnsDestination(self.control_topic) \
            if self.control_topic is not None else destinations.SqsDestination(self._delay_queue())
        poller = self._function(
            "Poller", POLLER_HANDLER, POLLER_TIMEOUT, POLLER_MEMORY_MB,
            "Punctual poller: sends a window of tasks to the delivery queue, re-arms the rule, serves the "
            "control topic" if direct else
            "Punctual poller: sends a window of tasks to the delay queue and re-arms the rule",
            **shared,
            reserved_concurrent_executions=poller_reserved_concurrency,
            retry_attempts=POLLER_RETRY_ATTEMPTS,
            max_event_age=POLLER_MAX_EVENT_AGE,
            on_failure=on_failure,
            # a poll request asked again goes round the control topic to the poller (direct delivery)
            **(RECURSION_ALLOWED if direct else {}),
        )
        consumer = None if direct else self._function(
            "Consumer", CONSUMER_HANDLER, CONSUMER_TIMEOUT, CONSUMER_MEMORY_MB,
            "Punctual consumer: delivers each task on its due millisecond",
            **shared,
            # a poll request asked again 20 s later goes round the delay queue to the consumer
            **RECURSION_ALLOWED,
        )
        editor = self._function(
            "Editor", EDITOR_HANDLER, EDITOR_TIMEOUT, EDITOR_MEMORY_MB,
            "Punctual editor: fast path for rows due soon, re-arming, rejection of malformed rows",
            **shared,
        )
        return poller, consumer, editor

    def _function(self, cid: str, handler: str, timeout: Duration, memory_mb: int, description: str,
                  **kw) -> lambda_.Function:
        """One function with its own log group and role (``kw``: the other ``lambda_.Function`` props)."""
        log_group = logs.LogGroup(self, f"{cid}Logs", retention=self.log_retention, removal_policy=self.removal_policy)
        # Own role instead of AWSLambdaBasicExecutionRole (logs:* on every log group):
        # writing to this function's log group is all it needs besides the statements below.
        role = iam.Role(self, f"{cid}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description=f"Punctual {cid.lower()} function")
        log_group.grant_write(role)
        return lambda_.Function(
            self,
            cid,
            handler=handler,
            timeout=timeout,
            memory_size=memory_mb,
            description=description,
            log_group=log_group,
            role=role,
            tracing=self.tracing,
            **kw,
        )

    def _delay_queue(self) -> sqs.Queue:
        """The delay queue, in the consumer mode (where there is one)."""
        assert self.delay_queue is not None
        return self.delay_queue

    def _build_rule(self, rule_name: str) -> events.Rule:
        """The one rule: created disabled on a placeholder minute; the functions re-arm it with PutRule."""
        return events.Rule(
            self,
            "Rule",
            rule_name=rule_name,
            description=RULE_DESCRIPTION,
            schedule=events.Schedule.expression(PLACEHOLDER_SCHEDULE),
            enabled=False,
            targets=[
                targets.LambdaFunction(
                    self.poller_function,
                    retry_attempts=RULE_TARGET_RETRY_ATTEMPTS,
                    max_event_age=RULE_TARGET_MAX_EVENT_AGE,
                    dead_letter_queue=self.rule_dead_letter_queue,
                )
            ],
        )

    def _connect_event_sources(self, consumer_max_concurrency: int | None) -> None:
        """The delay queue to the consumer (or the control topic to the poller), the stream to the editor."""
        stream_on_failure: lambda_.IEventSourceDlq
        if self.control_topic is not None:
            # A message SNS cannot deliver to the poller (after its delivery retries) is kept in the
            # rule DLQ (alarmed), not lost: the same queue as the rule's poller invocations.
            self.control_topic.add_subscription(
                subscriptions.LambdaSubscription(self.poller_function, dead_letter_queue=self.rule_dead_letter_queue)
            )
            stream_on_failure = sources.SnsDlq(self.control_topic)
        else:
            assert self.consumer_function is not None
            self.consumer_function.add_event_source(
                sources.SqsEventSource(
                    self._delay_queue(),
                    batch_size=10,
                    max_batching_window=Duration.seconds(0),  # never hold a due message back
                    report_batch_item_failures=True,
                    max_concurrency=consumer_max_concurrency,
                )
            )
            stream_on_failure = sources.SqsDlq(self._delay_queue())
        self.editor_function.add_event_source(
            sources.DynamoEventSource(
                self.table,
                # TRIM_HORIZON: rows written between table creation and the mapping are not skipped.
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=EDITOR_BATCH_SIZE,
                parallelization_factor=EDITOR_PARALLELIZATION,
                bisect_batch_on_error=True,
                retry_attempts=EDITOR_RETRY_ATTEMPTS,
                max_record_age=Duration.seconds(EDITOR_MAX_RECORD_AGE_S),
                report_batch_item_failures=True,
                on_failure=stream_on_failure,
                # Removals, the meta row and Punctual's own claims never invoke the editor
                # (punctual/core/stream_filter.py).
                filters=[lambda_.FilterCriteria.filter(pattern) for pattern in EDITOR_STREAM_FILTERS],
            )
        )

    # ---- least privilege -----------------------------------------------------------------------------
    def _grant_permissions(self, rule_name: str) -> None:
        """Exactly the calls each function makes (the ``*_ACTIONS`` above), then the keys' uses."""
        rule_arn = Stack.of(self).format_arn(service="events", resource="rule", resource_name=rule_name)
        table_arn = self.table.table_arn
        self._allow(self.poller_function, POLLER_TABLE_ACTIONS, [table_arn])
        self._allow(self.editor_function, EDITOR_TABLE_ACTIONS, [table_arn])
        if self.control_topic is None:
            self._grant_consumer_mode(rule_arn, table_arn)
        else:
            self._grant_direct_mode(rule_arn, self.control_topic)
        self._grant_keys()

    def _grant_consumer_mode(self, rule_arn: str, table_arn: str) -> None:
        delay_queue, consumer = self._delay_queue(), self.consumer_function
        assert consumer is not None
        self._allow(self.poller_function, SEND_ACTIONS, [delay_queue.queue_arn, self.rejected_queue.queue_arn])
        self._allow(self.poller_function, RULE_ACTIONS, [rule_arn])
        self._allow(self.poller_function, BACKLOG_ACTIONS, [delay_queue.queue_arn])

        self._allow(consumer, CONSUMER_TABLE_ACTIONS, [table_arn])
        # the delay queue: copies of pointers retried later, poll requests asked again
        self._allow(consumer, SEND_ACTIONS,
                    [self.delivery_queue.queue_arn, self.rejected_queue.queue_arn, delay_queue.queue_arn])
        self._allow(consumer, RULE_ACTIONS, [rule_arn])  # arming a poll asked for
        # ChangeMessageVisibility on the delay queue (putting back an early message) is part of
        # what the SQS event source grants (Receive/Delete/ChangeMessageVisibility/GetQueueAttributes).

        self._allow(self.editor_function, SEND_ACTIONS, [delay_queue.queue_arn, self.rejected_queue.queue_arn])
        self._allow(self.editor_function, RULE_ACTIONS, [rule_arn])

    def _grant_direct_mode(self, rule_arn: str, control_topic: sns.Topic) -> None:
        # The poller and the editor send the events themselves, and rejections; they ask for polls
        # on the control topic (its OnFailure destinations also grant sns:Publish, and encrypt
        # rights on a customer key). No delay queue: no backlog to read (usecases/poll.py).
        for fn in (self.poller_function, self.editor_function):
            self._allow(fn, SEND_ACTIONS, [self.delivery_queue.queue_arn, self.rejected_queue.queue_arn])
            self._allow(fn, RULE_ACTIONS, [rule_arn])
            self._allow(fn, PUBLISH_ACTIONS, [control_topic.topic_arn])

    def _grant_keys(self) -> None:
        """Encrypt and decrypt with the customer key, the brought delivery queue's and the brought table's."""
        key = self.encryption_key
        if key is not None:
            for fn in self.functions:
                key.grant_encrypt_decrypt(fn)
            # EventBridge writes failed poller invocations to the (encrypted) rule DLQ.
            key.grant_encrypt_decrypt(iam.ServicePrincipal("events.amazonaws.com"))
            if self.control_topic is not None:
                # SNS writes the control messages it could not deliver to the (encrypted) rule DLQ.
                key.grant(iam.ServicePrincipal("sns.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*")
        delivery_key = self.delivery_queue.encryption_master_key
        if delivery_key is not None and delivery_key is not key:
            # the functions that send the events: the consumer, or in direct delivery the poller and the editor
            senders: tuple[lambda_.Function | None, ...] = (self.poller_function, self.editor_function) \
                if self.control_topic is not None else (self.consumer_function,)
            for sender in senders:
                if sender is not None:
                    delivery_key.grant_encrypt_decrypt(sender)
        table_key = self.table.encryption_key  # a brought table's own key
        if table_key is not None and table_key is not key:
            for fn in self.functions:
                table_key.grant_encrypt_decrypt(fn)

    @staticmethod
    def _allow(fn: lambda_.Function, actions: Sequence[str], resources: Sequence[str]) -> None:
        fn.add_to_role_policy(iam.PolicyStatement(actions=list(actions), resources=list(resources)))

    # ---- deployments that reset the rule -------------------------------------------------------------
    # CloudFormation creates the rule, and re-puts it on any change to its properties, with
    # the template's placeholder: DISABLED. The arm in the meta row would then be missed until
    # the next insert (and with no insert, never). After each such change, invoke the poller
    # once (asynchronously): it polls and re-applies the meta row's arm to the rule.
    def _resync_after_rule_changes(self, rule_name: str) -> cr.AwsCustomResource:
        """An ``AwsCustomResource`` whose create/update invokes the poller (event invocation: the
        deployment does not wait for the poll). Its payload carries every property the rule is
        created with, so any change that makes CloudFormation re-put the rule also updates this
        resource, which runs after the rule (``tests/infra`` checks the payload covers them all)."""
        rule_props = {
            "Name": rule_name,
            "Description": RULE_DESCRIPTION,
            "ScheduleExpression": PLACEHOLDER_SCHEDULE,
            "State": "DISABLED",
            "Target": {
                "Arn": self.poller_function.function_arn,
                "RetryAttempts": RULE_TARGET_RETRY_ATTEMPTS,
                "MaximumEventAgeInSeconds": RULE_TARGET_MAX_EVENT_AGE.to_seconds(),
                "DeadLetterArn": self.rule_dead_letter_queue.queue_arn,
            },
        }
        payload = Stack.of(self).to_json_string({"source": RESYNC_SOURCE, "rule": rule_props})
        call = cr.AwsSdkCall(
            service="Lambda",
            action="invoke",
            parameters={"FunctionName": self.poller_function.function_name, "InvocationType": "Event",
                        "Payload": payload},
            physical_resource_id=cr.PhysicalResourceId.of(f"{rule_name}-resync"),
        )
        resync = cr.AwsCustomResource(
            self,
            "ResyncRule",
            on_create=call,
            on_update=call,
            policy=cr.AwsCustomResourcePolicy.from_statements([
                iam.PolicyStatement(actions=["lambda:InvokeFunction"],
                                    resources=[self.poller_function.function_arn]),
            ]),
            install_latest_aws_sdk=False,
            # CDK's provider function logs here, not to a never-expiring /aws/lambda/... group (if this
            # construct creates the stack's provider: it is one function per stack, shared)
            log_group=logs.LogGroup(self, "ResyncRuleLogs", retention=self.log_retention,
                                    removal_policy=self.removal_policy),
        )
        # after the rule is (re)put, and after the poller and its permissions are in place
        resync.node.add_dependency(self.rule, self.poller_function)
        return resync

    # ---- cdk-scheduler compatible aliases ------------------------------------------------------------
    @property
    def scheduler_table(self) -> dynamodb.ITable:
        """Alias of :attr:`table` (cdk-scheduler's name)."""
        return self.table

    @property
    def scheduling_queue(self) -> sqs.IQueue:
        """Alias of :attr:`delivery_queue` (cdk-scheduler's name)."""
        return self.delivery_queue

    # ---- grants: each returns an iam.Grant (aws-cdk DESIGN_GUIDELINES) -------------------------------
    def grant_schedule(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` write, read, list and cancel task rows (raw writes or the editor's client).

        Restricted to the task partitions (``dynamodb:LeadingKeys``): producers can never read or
        write Punctual's meta partition, only check a delivery fence there (``ConditionCheckItem``:
        cancel and reschedule). Also grants use of the table's KMS key if it has one; the returned
        grant is all of them (``iam.Grant.combine``), so ``assert_success`` and ``apply_before``
        cover the key too.
        """
        grant = iam.Grant.add_to_principal(
            grantee=grantee,
            actions=list(SCHEDULE_ACTIONS),
            resource_arns=[self.table.table_arn],
            conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": list(self.partitions)}},
        ).combine(iam.Grant.add_to_principal(
            grantee=grantee,
            actions=list(FENCE_CHECK_ACTIONS),
            resource_arns=[self.table.table_arn],
            conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [META_PK]}},
        ))
        if self.table.encryption_key is not None:
            grant = grant.combine(self.table.encryption_key.grant_encrypt_decrypt(grantee))
        return grant

    def grant_consume(self, grantee: iam.IGrantable) -> iam.Grant:
        """Let ``grantee`` receive and delete delivered events (``sqs.IQueue.grant_consume_messages``)."""
        return self.delivery_queue.grant_consume_messages(grantee)

    # ---- compliance ----------------------------------------------------------------------------------
    def _acknowledge_nag_findings(self) -> None:
        """cdk-nag (AwsSolutions) findings inherent to the design, acknowledged where they arise.

        cdk-nag 3.x reads CDK's native ``Validations.of(...).acknowledge`` (``NagSuppressions``
        is gone); acknowledging here means users running cdk-nag on their app see only their own
        findings. Each reason is the justification.
        """

        def ack(construct: IConstruct, rule: str, reason: str) -> None:
            Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))

        # (the delay and delivery DLQs are recognised as DLQs by cdk-nag: they are redrive targets)
        for q in (self.rejected_queue, self.rule_dead_letter_queue):
            ack(q, "AwsSolutions-SQS3",
                "A dead-letter or rejected-rows queue (Lambda on-failure destination, EventBridge target DLQ, "
                "Punctual's rejections): it is the end of the line and needs no DLQ of its own.")
        # DynamoEventSource -> table.grantStreamRead adds dynamodb:ListStreams on "*": the action
        # does not support resource-level permissions (AWS requirement).
        editor_role = self.editor_function.role  # always ours (_function)
        assert editor_role is not None
        ack(editor_role, "AwsSolutions-IAM5[Resource::*]",
            "dynamodb:ListStreams (added by the DynamoDB event source) supports no resource-level permissions.")
        if self.resync is not None:
            # The AwsCustomResource provider: one Node.js function per stack, shared by every
            # AwsCustomResource in it, created by CDK with the basic execution role.
            provider_id = "AWS" + cr.AwsCustomResource.PROVIDER_FUNCTION_UUID.replace("-", "")
            provider = Stack.of(self).node.try_find_child(provider_id)
            if provider is not None:
                ack(provider, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                              "AWSLambdaBasicExecutionRole]",
                    "CDK's AwsCustomResource provider (runs at deploy time only) writes its logs with the "
                    "AWS managed basic execution role; its only other permission is lambda:InvokeFunction "
                    "on the poller.")
                ack(provider, "AwsSolutions-L1",
                    "CDK's AwsCustomResource provider: its Node.js runtime is chosen and updated by aws-cdk-lib.")
        traced = self.tracing is not None and self.tracing != lambda_.Tracing.DISABLED
        for fn in self.functions:
            if traced and fn.role is not None:
                ack(fn.role, "AwsSolutions-IAM5[Resource::*]",
                    "X-Ray tracing (the tracing prop): xray:PutTraceSegments and xray:PutTelemetryRecords support "
                    "no resource-level permissions.")
            ack(fn, "AwsSolutions-L1",
                "The runtime is a prop (default python3.13, the version the bundled wheels are built and tested "
                "for); newer runtimes are opt-in.")
            if self.encryption_key is not None and fn.role is not None:  # role: always ours (function())
                for action in ("kms:GenerateDataKey*", "kms:ReEncrypt*"):
                    ack(fn.role, f"AwsSolutions-IAM5[Action::{action}]",
                        "IKey.grant_encrypt_decrypt on the customer key given to the construct, and on no other "
                        "resource: the wildcard names the GenerateDataKey/ReEncrypt variants KMS uses for SQS "
                        "and DynamoDB envelope encryption.")
