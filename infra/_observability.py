"""What a ``Scheduler`` shows an operator: its metrics (``metric_*``), its alarms and its dashboard.

:class:`SchedulerObservability` is the base of :class:`infra.construct.Scheduler` (as aws-cdk's
``QueueBase`` holds a queue's metrics over the attributes ``Queue`` sets): a new metric gets its
``metric_*`` method here, its widget in :meth:`~SchedulerObservability._create_dashboard` and, if it
is watched, its alarm in :meth:`~SchedulerObservability._create_alarms`. Metric names come from
:mod:`punctual.core.metrics_names`, as the functions emit them.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from punctual.core.metrics_names import (
    DELIVERED,
    DROPPED,
    FUNCTION_FAILURES,
    INSTANCE_DIMENSION,
    LATENESS_MS,
    ORPHANS_DEFERRED,
    POISON_MESSAGES,
    PUT_BACK,
    REJECTED_ROWS,
)

METRIC_PERIOD = Duration.minutes(5)
# What a message in each dead-letter queue is (its alarm's description).
DEAD_LETTER_WHAT = {
    "DelayDeadLetterQueue": "pointers the consumer failed 10 times",
    "DeliveryDeadLetterQueue": "delivered events your consumers failed 5 times",
    "RuleDeadLetterQueue": "poller invocations EventBridge could not make",
}
# In direct delivery the rule DLQ also keeps the control topic's messages SNS could not deliver to the poller.
DEAD_LETTER_WHAT_DIRECT = {
    **DEAD_LETTER_WHAT,
    "RuleDeadLetterQueue": "poller invocations EventBridge or the control topic could not make",
}


class SchedulerObservability(Construct):
    """The metrics, alarms and dashboard of a scheduler, over the resources its constructor creates."""

    # Set by Scheduler's constructor (infra/construct.py), documented there.
    metrics_namespace: str
    instance_name: str
    delay_queue: sqs.Queue | None
    delay_dead_letter_queue: sqs.Queue | None
    dead_letter_queue: sqs.IQueue | None
    rule_dead_letter_queue: sqs.Queue
    control_topic: sns.Topic | None
    poller_function: lambda_.Function
    consumer_function: lambda_.Function | None
    editor_function: lambda_.Function
    alarms: list[cloudwatch.Alarm]
    dashboard: cloudwatch.Dashboard | None

    @property
    def dead_letter_queues(self) -> list[sqs.IQueue]:
        """Every dead-letter queue this construct owns (a message there is a failure to look at)."""
        dlqs: list[sqs.IQueue] = [self.rule_dead_letter_queue]
        if self.delay_dead_letter_queue is not None:  # not in direct delivery
            dlqs.insert(0, self.delay_dead_letter_queue)
        if self.dead_letter_queue is not None:
            dlqs.append(self.dead_letter_queue)
        return dlqs

    @property
    def functions(self) -> list[lambda_.Function]:
        """The poller, the consumer (not in direct delivery) and the editor."""
        return [fn for fn in (self.poller_function, self.consumer_function, self.editor_function) if fn is not None]

    # ---- metrics ----------------------------------------------------------------------------------
    def metric(self, metric_name: str, **options) -> cloudwatch.Metric:
        """One of the metrics the functions emit (names in :mod:`punctual.core.metrics_names`), as this
        scheduler's: in :attr:`metrics_namespace`, with the dimension ``Instance`` =
        :attr:`instance_name` (merged into any ``dimensions_map`` given; the functions emit no other
        dimension, so an extra one selects no data). ``options`` are ``cloudwatch.MetricOptions``
        fields (``statistic``, ``period``, ``unit``, ``label``, ...). Default: Sum over 5 minutes.
        """
        dimensions = {**(options.pop("dimensions_map", None) or {}), INSTANCE_DIMENSION: self.instance_name}
        options.setdefault("statistic", "Sum")
        options.setdefault("period", METRIC_PERIOD)
        return cloudwatch.Metric(namespace=self.metrics_namespace, metric_name=metric_name,
                                 dimensions_map=dimensions, **options)

    def metric_lateness(self, *, statistic: str = "p99", period: Duration | None = None,
                        **options) -> cloudwatch.Metric:
        """Delivery lateness in ms (due time -> delivered), emitted by the consumer (in direct delivery
        by the poller and the editor: the lateness their sends planned). Default p99 over 5 min."""
        options.setdefault("unit", cloudwatch.Unit.MILLISECONDS)
        return self.metric(LATENESS_MS, statistic=statistic, period=period or METRIC_PERIOD, **options)

    def metric_rejected_rows(self, *, period: Duration | None = None, **options) -> cloudwatch.Metric:
        """Rows rejected as malformed or undeliverable (sum by default), emitted by every function."""
        return self.metric(REJECTED_ROWS, period=period or METRIC_PERIOD, **options)

    def metric_function_failures(self, *, period: Duration | None = None, **options) -> cloudwatch.Metric:
        """Lambda failure notices the consumer received (in direct delivery: the poller, from the control
        topic) (sum by default): a poll whose attempts ran out, a stream batch the editor's mapping gave
        up on. Emitted only when there is one: no data means none."""
        return self.metric(FUNCTION_FAILURES, period=period or METRIC_PERIOD, **options)

    def metric_delay_queue_age(self, **options) -> cloudwatch.Metric:
        """Age in seconds of the delay queue's oldest message. ``options``: ``cloudwatch.MetricOptions``
        fields. Default: Maximum over 5 minutes. A ``ValueError`` in direct delivery (no delay queue)."""
        if self.delay_queue is None:
            raise ValueError('delivery="direct" deploys no delay queue: it has no age to measure')
        options.setdefault("statistic", "Maximum")
        options.setdefault("period", METRIC_PERIOD)
        return self.delay_queue.metric_approximate_age_of_oldest_message(**options)

    def metric_dead_letter_queue(self, queue: sqs.IQueue, **options) -> cloudwatch.Metric:
        """Messages visible in one dead-letter ``queue``. ``options``: ``cloudwatch.MetricOptions`` fields.
        Default: Maximum over 5 minutes. An empty queue left alone for hours stops publishing (SQS
        publishes a queue's metrics while it is active): no data then means no message."""
        options.setdefault("statistic", "Maximum")
        options.setdefault("period", METRIC_PERIOD)
        return queue.metric_approximate_number_of_messages_visible(**options)

    def metric_dead_letters(self, **options) -> cloudwatch.MathExpression:
        """Messages visible in all of this construct's dead-letter queues: the sum of each queue's
        maximum, each ``FILL``-ed with 0, so the sum has data while any one queue publishes (a bare
        ``d0 + d1 + ...`` has none while one queue is inactive). For graphs; the alarms watch each
        queue on its own (:meth:`metric_dead_letter_queue`). ``options``: ``cloudwatch.MetricOptions``
        fields; ``label``, ``color`` and ``period`` apply to the sum, the others to each queue's metric.
        Default: Maximum over 5 minutes, label "Dead letters"."""
        outer = {k: options.pop(k) for k in ("label", "color") if k in options}
        outer.setdefault("label", "Dead letters")
        period = options.setdefault("period", METRIC_PERIOD)
        metrics = {f"d{i}": self.metric_dead_letter_queue(q, **options) for i, q in enumerate(self.dead_letter_queues)}
        return cloudwatch.MathExpression(
            expression=" + ".join(f"FILL({m}, 0)" for m in metrics), using_metrics=metrics, period=period, **outer,
        )

    # ---- alarms and dashboard ---------------------------------------------------------------------
    def _create_alarms(self, lateness_threshold_ms: float, delay_age_threshold: Duration) -> list[cloudwatch.Alarm]:
        """The alarms (no actions: the user adds them via :attr:`alarms`)."""
        alarms: list[cloudwatch.Alarm] = []

        def alarm(cid: str, metric: cloudwatch.IMetric, threshold: float, description: str) -> None:
            alarms.append(
                cloudwatch.Alarm(
                    self,
                    cid,
                    metric=metric,
                    threshold=threshold,
                    evaluation_periods=1,
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                    treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                    alarm_description=description,
                )
            )

        name = f"Punctual {self.instance_name}"
        what = DEAD_LETTER_WHAT_DIRECT if self.control_topic is not None else DEAD_LETTER_WHAT
        # One alarm per dead-letter queue, on its own metric: a sum of the queues' metrics has no data
        # while any queue is inactive (SQS publishes an idle empty queue's metrics for ~6 hours only).
        for q in self.dead_letter_queues:
            alarm(f"{q.node.id}Alarm", self.metric_dead_letter_queue(q), 1,
                  f"{name}: messages in the dead-letter queue {q.node.id} ({what[q.node.id]})")
        for fn in self.functions:
            alarm(f"{fn.node.id}ErrorsAlarm", fn.metric_errors(period=METRIC_PERIOD, statistic="Sum"), 1,
                  f"{name}: {fn.node.id.lower()} function errors")
        alarm("LatenessAlarm", self.metric_lateness(), lateness_threshold_ms,
              f"{name}: p99 delivery lateness >= {lateness_threshold_ms} ms")
        alarm("RejectedRowsAlarm", self.metric_rejected_rows(), 1,
              f"{name}: rows rejected (see the rejected-rows queue for the reason and the row)")
        server = "the poller (control topic)" if self.control_topic is not None else "the consumer"
        alarm("FunctionFailuresAlarm", self.metric_function_failures(), 1,
              f"{name}: a poll's attempts or a stream batch's retries ran out ({server} armed a poll for "
              "their rows; its 'poll wanted' log lines name them)")
        if self.delay_queue is None:  # direct delivery: no delay queue, no consumer to watch
            return alarms
        age_s = delay_age_threshold.to_seconds(integral=False)
        alarm("DelayQueueAgeAlarm", self.metric_delay_queue_age(), age_s,
              f"{name}: a pointer has been in the delay queue >= {age_s:g} s (pointers wait up to the window, "
              "then are received at once: the consumer is failing or not receiving)")
        return alarms

    def _create_dashboard(self) -> cloudwatch.Dashboard:
        """One dashboard of this scheduler: what a task goes through, then what failed."""
        def graph(title: str, *metrics: cloudwatch.IMetric, width: int = 8) -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(title=title, left=list(metrics), width=width, height=6)

        def queue_depth(q: sqs.IQueue) -> list[cloudwatch.IMetric]:
            return [q.metric_approximate_number_of_messages_visible(statistic="Maximum", period=METRIC_PERIOD),
                    q.metric_approximate_number_of_messages_delayed(statistic="Maximum", period=METRIC_PERIOD),
                    q.metric_approximate_number_of_messages_not_visible(statistic="Maximum", period=METRIC_PERIOD)]

        dash = cloudwatch.Dashboard(self, "Dashboard")
        dash.add_widgets(
            graph("Lateness (ms)", *(self.metric_lateness(statistic=st, label=st) for st in ("p50", "p99", "Maximum"))),
            graph("Tasks", *(self.metric(n, label=n) for n in (DELIVERED, DROPPED, PUT_BACK, ORPHANS_DEFERRED))),
            graph("Failures", self.metric_dead_letters(), self.metric_rejected_rows(label=REJECTED_ROWS),
                  self.metric(POISON_MESSAGES, label=POISON_MESSAGES)),
        )
        if self.delay_queue is not None:  # not in direct delivery
            dash.add_widgets(
                graph("Delay queue (messages)", *queue_depth(self.delay_queue), width=12),
                graph("Delay queue: oldest message (s)", self.metric_delay_queue_age(), width=12),
            )
        dash.add_widgets(*(
            graph(f"{fn.node.id}", fn.metric_invocations(period=METRIC_PERIOD), fn.metric_errors(period=METRIC_PERIOD),
                  fn.metric_throttles(period=METRIC_PERIOD),
                  fn.metric_duration(statistic="p99", period=METRIC_PERIOD))
            for fn in self.functions
        ))
        if self.alarms:
            dash.add_widgets(cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=24))
        return dash
