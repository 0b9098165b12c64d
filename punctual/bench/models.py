"""Modelled AWS behaviour: every number the simulator draws, with where it comes from.

Override any of them with ``Models(**changes)`` (``punctual bench --set name=value``, or a models file:
``--models FILE``, punctual/bench/models_file.py). Latencies are distributions of ms
(punctual/bench/distributions.py): fitted to the public measurements where there are some (a shifted
log-normal fitted to their quantiles, no cap but a physical one), an assumption where there are none
(SOURCES says which). A ``(lo, hi)`` pair is a uniform range, a number a fixed value.

Two readings (``punctual bench --reading``): the public fit (these defaults) and a pessimistic one
(PESSIMISTIC: each parameter's pessimistic value, with why), shown beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from punctual.deployment import (
    DELAY_QUEUE_VISIBILITY_S,
    EDITOR_MAX_RECORD_AGE_S,
    EDITOR_RETRY_ATTEMPTS,
    POLLER_MAX_EVENT_AGE_S,
)
from punctual.lambda_events import ASYNC_RETRY_DELAYS_MS, async_retry_delays

from .distributions import Dist, Empirical, Fit, Fixed, LogNormal, Samples, Uniform, fit_lognormal

# The bound of the "early" SQS reading (`punctual bench --reading early`, and part of the pessimistic one): a
# stress assumption, not a documented behaviour (SOURCES["sqs_early_max_ms"]).
EARLY_READING_MS = 1_000

# The public measurements the defaults are fitted to: (probability -> ms), each cited in SOURCES.
BITESIZED = ("bitesizedserverless.com/bite/serverless-messaging-latency-compared/ (\"Serverless Messaging: Latency "
             "Compared\", eu-west-1, 4-5 September 2022, 1,024 messages per service, p10/p50/p90/p99; EventBridge "
             "measured again after its February 2023 upgrade)")
COLD_STARTS = ("edjgeek.com/blog/lambda-cold-starts-dead (\"Cold Starts Are Dead\", 2026, by an AWS developer "
               "advocate: production cold starts, Python 3.13 p50 200-400 ms, p99 800 ms-1.2 s, x86)")
PUBLIC_QUANTILES: dict[str, dict[float, float]] = {
    "sqs_poll_latency_ms": {0.1: 13.7, 0.5: 16.2, 0.9: 33.8, 0.99: 105},  # SQS standard -> Lambda (ESM)
    "sns_delivery_latency_ms": {0.1: 62, 0.5: 73, 0.9: 125, 0.99: 225},  # SNS standard -> Lambda (async)
    "stream_latency_ms": {0.1: 118, 0.5: 213, 0.9: 341, 0.99: 552},  # DynamoDB Streams -> Lambda (ESM)
    "rule_target_delay_ms": {0.1: 113, 0.5: 148, 0.9: 241, 0.99: 387},  # EventBridge -> Lambda, Feb 2023
    "cold_start_ms": {0.5: 300, 0.99: 1_000},  # the ranges' midpoints
}
# The pessimistic reading's quantiles (PESSIMISTIC_WHY says why each).
PESSIMISTIC_QUANTILES: dict[str, dict[float, float]] = {
    "sqs_poll_latency_ms": {p: 3 * x for p, x in PUBLIC_QUANTILES["sqs_poll_latency_ms"].items()},
    "sns_delivery_latency_ms": {p: 2 * x for p, x in PUBLIC_QUANTILES["sns_delivery_latency_ms"].items()},
    "stream_latency_ms": {p: 2 * x for p, x in PUBLIC_QUANTILES["stream_latency_ms"].items()},
    "rule_target_delay_ms": {0.1: 221, 0.5: 395, 0.9: 579, 0.99: 794},  # EventBridge -> Lambda, Sept 2022
    "cold_start_ms": {0.5: 400, 0.99: 1_500},
}
# Physical caps (none elsewhere): Lambda's INIT phase is limited to 10 s (Lambda docs, "Understanding the Lambda
# execution environment lifecycle": "The Init phase is limited to 10 seconds").
CAPS_MS = {"cold_start_ms": 10_000}
FITS: dict[str, Fit] = {name: fit_lognormal(q, CAPS_MS.get(name)) for name, q in PUBLIC_QUANTILES.items()}
PESSIMISTIC_FITS: dict[str, Fit] = {name: fit_lognormal(q, CAPS_MS.get(name))
                                    for name, q in PESSIMISTIC_QUANTILES.items()}
# Idle execution environments: "the lifetime of an idle instance is between 5 and 7 minutes" (SOURCES).
WARM_IDLE_PUBLIC = Uniform(300_000, 420_000)


@dataclass(frozen=True)
class Models:
    # EventBridge rule: a cron fires somewhere inside its minute, then the target starts.
    rule_fire_spread_ms: int = 60_000
    rule_target_delay_ms: Dist = FITS["rule_target_delay_ms"].dist
    # SQS: a delayed message may become visible up to this much before its delay ends (0: when
    # it ends, what AWS documents; the early and pessimistic readings: EARLY_READING_MS)...
    sqs_early_max_ms: int = 0
    # ...and Lambda's SQS pollers pick a visible message up after this long.
    sqs_poll_latency_ms: Dist = FITS["sqs_poll_latency_ms"].dist
    # Lambda: a new execution environment (Python + boto3 + pydantic) before the handler runs.
    cold_start_ms: Dist = FITS["cold_start_ms"].dist
    # An idle execution environment is reused for this long (drawn each time it goes idle), then reclaimed.
    warm_idle_ms: Dist = WARM_IDLE_PUBLIC
    # Lambda SQS scaling: 5 concurrent batches, +300 per minute while messages wait, max 1,000.
    esm_initial_concurrency: int = 5
    esm_scale_per_minute: int = 300
    esm_max_concurrency: int = 1_000
    # ...and while the queue is idle, this many pollers each long-poll it, one billed ReceiveMessage per wait.
    esm_idle_pollers: int = 5
    esm_idle_wait_s: int = 20
    # Direct delivery's control topic (SNS): from a Publish to the poller's invocation with the message.
    sns_delivery_latency_ms: Dist = FITS["sns_delivery_latency_ms"].dist
    # DynamoDB stream -> Lambda: time from a write to the invocation that carries it.
    stream_latency_ms: Dist = FITS["stream_latency_ms"].dist
    stream_batch_size: int = 100  # the construct's EDITOR_BATCH_SIZE
    stream_retry_delay_ms: int = 1_000
    stream_max_retries: int = EDITOR_RETRY_ATTEMPTS  # the construct's (punctual/deployment.py)
    stream_max_record_age_ms: int = EDITOR_MAX_RECORD_AGE_S * 1000  # the construct's
    # The stream's shards (one per table partition) and the batches Lambda runs at once per shard
    # (ParallelizationFactor: the construct's EDITOR_PARALLELIZATION). A record's lane, in order, is
    # picked by its partition key: with one partition key value (shards=1) there is one lane.
    stream_shards: int = 4
    stream_parallelization: int = 10
    # Service-side latency of one API call, added to the caller's virtual time.
    api_latency_ms: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {"dynamodb": (3, 8), "sqs": (5, 15), "events": (20, 60), "sns": (10, 30)}
    )
    # EventBridge's control-plane quota (DescribeRule, PutRule, EnableRule, DisableRule...): requests a
    # second per account, one token bucket shared by every function, holding this much of it (0: none).
    events_control_tps: int = 50
    events_control_burst_ms: int = 1_000
    # Delay queue visibility timeout (construct: 6 x the consumer's 30 s timeout).
    delay_visibility_ms: int = DELAY_QUEUE_VISIBILITY_S * 1000
    # Lambda asynchronous invocation (the poller, from the rule): 2 retries, after 1 and 2 min.
    async_retry_delays_ms: tuple[int, ...] = ASYNC_RETRY_DELAYS_MS
    # Punctual's poller: the retries that fit its maximum event age (the construct's)
    poller_retry_delays_ms: tuple[int, ...] = async_retry_delays(POLLER_MAX_EVENT_AGE_S * 1000)
    # EventBridge Scheduler one-time schedule: fires within this window after its time.
    scheduler_fire_window_ms: int = 60_000
    # cdk-scheduler: rate(14 minutes) rule, 15-minute window, Query without pagination (1 MB).
    cdk_period_ms: int = 14 * 60_000
    cdk_window_ms: int = 15 * 60_000
    cdk_query_limit_bytes: int = 1_048_576
    # cdk-scheduler's client CPU: the Node SDK charged botocore's measured CPU per call times this
    # (assumption; 0 = free, the reading most favourable to it), and its re-filter of the page after
    # each chunk of 10, per row of the page at one vCPU (bench/measure_cdk_refilter.js).
    cdk_sdk_cpu_scale: float = 1.0
    cdk_refilter_us_per_row: float = 0.6
    # Client CPU of each AWS call the handlers make, as measured per call type and size by
    # bench/measure_client_cpu.py (punctual/bench/cpu.py), times this factor (0: no CPU model).
    client_cpu_scale: float = 1.0
    consumer_memory_mb: int = 512
    poller_memory_mb: int = 1024
    # DynamoDB per-partition-key-value throughput (on for scenarios with throttling=True: firehose),
    # a token bucket holding this much of it; reads and writes are limited independently.
    ddb_partition_wcu_per_s: int = 1_000
    ddb_partition_rcu_per_s: int = 3_000
    ddb_partition_burst_ms: int = 1_000
    # The producer's SDK retrying its throttled PutItem: base * 2^(attempt - 1), up to this many attempts...
    sdk_retry_base_ms: int = 50
    sdk_max_attempts: int = 10
    # Faults scenario only (other scenarios inject none): share of AWS calls failing, and of calls
    # after which the function dies; `--set fault_call_failure_rate=0 --set fault_crash_rate=0` leaves
    # the scenario's outages alone.
    fault_call_failure_rate: float = 0.01
    fault_crash_rate: float = 0.002

    def __post_init__(self) -> None:
        """A ``(lo, hi)`` pair given for a distribution is a uniform range, a number a fixed value."""
        for f in fields(self):
            if f.type == "Dist":
                object.__setattr__(self, f.name, as_dist(getattr(self, f.name), f.name))

    def with_overrides(self, pairs: list[str]) -> Models:
        """``--set NAME=VALUE`` pairs: a distribution takes ``lo,hi`` (uniform) or one number (fixed)."""
        kinds = {f.name: f for f in fields(self)}
        changes: dict[str, Any] = {}  # field name -> value of that field's type
        for pair in pairs:
            name, _, raw = pair.partition("=")
            if name not in kinds:
                raise SystemExit(f"unknown model parameter {name!r}; known: {', '.join(sorted(kinds))}")
            current = getattr(self, name)
            try:
                if kinds[name].type == "Dist" or isinstance(current, tuple):
                    numbers = tuple(int(x) for x in raw.split(","))
                    changes[name] = numbers if isinstance(current, tuple) else as_dist(numbers, name)
                elif isinstance(current, float):
                    changes[name] = float(raw)
                elif isinstance(current, int):
                    changes[name] = int(raw)
                else:
                    raise SystemExit(f"{name} cannot be set from the command line (use --models FILE)")
            except ValueError as exc:
                raise SystemExit(f"--set {pair}: {exc}") from None
        return replace(self, **changes)


def as_dist(value: Any, name: str = "value") -> Dist:
    """A distribution from what a user may give: one already, ``(lo, hi)`` (uniform) or a number (fixed)."""
    if isinstance(value, Fixed | Uniform | LogNormal | Empirical | Samples):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return Fixed(int(value))
    if isinstance(value, tuple | list) and len(value) == 1:
        return as_dist(value[0], name)
    if (isinstance(value, tuple | list) and len(value) == 2 and all(isinstance(v, int) for v in value)
            and 0 <= value[0] <= value[1]):
        return Uniform(int(value[0]), int(value[1]))
    raise ValueError(f"{name}: a distribution is lo,hi (uniform, 0 <= lo <= hi), one number (fixed) or, in a "
                     f"models file, a family with its quantiles or samples; got {value!r}")


# The pessimistic reading (`punctual bench --reading pessimistic`): each parameter's pessimistic value, and why.
PESSIMISTIC: dict[str, Any] = {
    **{name: fit.dist for name, fit in PESSIMISTIC_FITS.items()},
    "warm_idle_ms": Fixed(300_000),
    "esm_scale_per_minute": 60,
    "sqs_early_max_ms": EARLY_READING_MS,
}
PESSIMISTIC_WHY: dict[str, str] = {
    "sqs_poll_latency_ms": "the measured shape 3x slower (p99 315 ms): one measurement of 1,024 messages (its p99 "
    "rests on ~10 of them), in one region on two days, of messages sent to a queue being read, not of a delay "
    "timer ending on a queue idle for minutes; the same event source on a FIFO queue measured p99 645 ms",
    "cold_start_ms": "p50 400 ms (the top of the published p50 range), p99 1.5 s (past its top, 1.2 s): the "
    "functions import boto3 and pydantic and build three or four clients; the published figures are for x86",
    "warm_idle_ms": "5 minutes, the low end of the one measurement of idle lifetimes (5-7 minutes): a sparse "
    "consumer then starts cold more often",
    "esm_scale_per_minute": "60 a minute: Lambda's SQS scaling rate before its 2023 change (\"up to\" 300 now)",
    "sqs_early_max_ms": "no public figure for the delay timer's precision: delayed messages visible up to 1 s early "
    "(the early reading), against the never-early invariant",
    "rule_target_delay_ms": "EventBridge -> Lambda as measured in September 2022, before the February 2023 upgrade "
    "(p50 395, p99 794 ms); no public figure for a scheduled rule's target delay",
    "stream_latency_ms": "the measured DynamoDB Streams -> Lambda shape 2x slower (p99 1.1 s): one idle table, one "
    "measurement; a busier table has more shards and polls",
    "sns_delivery_latency_ms": "the measured SNS -> Lambda shape 2x slower (p99 450 ms): one measurement",
}
READINGS = ("public", "pessimistic", "early")  # `punctual bench --reading`; "public" is the default
# What a user's `punctual calibrate` replaces each parameter with: the self-measurement of a deployment
# (issue 40: the functions' own metrics) or the probe's (`punctual probe`: the SQS delay timer).
CALIBRATED_BY: dict[str, str] = {
    "sqs_poll_latency_ms": "the consumer's pick-up: a message's planned visibility to its handler's start",
    "cold_start_ms": "the functions' INIT durations (cold starts)",
    "warm_idle_ms": "the share of cold starts against the time since a function last ran",
    "rule_target_delay_ms": "the poller's delay from its armed minute to its start (with rule_fire_spread_ms)",
    "stream_latency_ms": "the editor's lag from a stream record's creation to its handler's start",
    "sqs_early_max_ms": "`punctual probe`: where the first receive lands against SentTimestamp + DelaySeconds",
}


def reading(name: str, models: Models, kept: frozenset[str] = frozenset()) -> Models:
    """The models of reading ``name``: ``models`` (the public fit with the user's overrides) with the
    reading's own values for every parameter not in ``kept`` (those the user set: theirs win).
    "public" is ``models``; "early" adds the early SQS timer (``sqs_early_max_ms`` as set, else
    EARLY_READING_MS); "pessimistic" takes every PESSIMISTIC value, the early timer included."""
    early = models.sqs_early_max_ms or EARLY_READING_MS
    if name == "public":
        return models
    if name == "early":
        return replace(models, sqs_early_max_ms=early)
    if name == "pessimistic":
        changes = {k: v for k, v in PESSIMISTIC.items() if k not in kept}
        return replace(models, **{**changes, "sqs_early_max_ms": early})
    raise ValueError(f"unknown reading {name!r}; known: {', '.join(READINGS)}")


SOURCES: dict[str, str] = {
    "rule_fire_spread_ms": "EventBridge docs (scheduled rules): 'the rule runs within the minute', not at :00; "
    "minute granularity, so 0-60 s into the armed minute (uniform).",
    "rule_target_delay_ms": "No public figure for a scheduled rule's target: the closest measured path, an "
    f"EventBridge event bus invoking a Lambda function asynchronously ({BITESIZED}): p10/p50/p90/p99 113 / 148 / "
    "241 / 387 ms after EventBridge's February 2023 upgrade, fitted (FITS); the rule's own moment inside its "
    "minute is rule_fire_spread_ms.",
    "sqs_early_max_ms": "Default 0: the documented model. AWS documents on-time visibility only. "
    "SendMessage/SendMessageBatchRequestEntry DelaySeconds (SQS API reference, as in "
    "docs.aws.amazon.com/sdk-for-kotlin/api/latest/sqs/.../-send-message-request/delay-seconds.html): 'Messages "
    "with a positive DelaySeconds value become available for processing after the delay period is finished'; "
    "SQS Developer Guide, 'Amazon SQS delay queues' (docs.aws.amazon.com/AWSSimpleQueueService/latest/"
    "SQSDeveloperGuide/sqs-delay-queues.html): messages 'remain invisible to consumers for the duration of the "
    "delay period'. No public figure: no precision is stated and no published measurement of early (or "
    "sub-second) visibility was found (AWS docs, re:Post, GitHub issues, blogs searched; the latency comparison "
    "cited for the pick-up measures no delay timer). The early and pessimistic readings take up to 1 s early "
    "(uniform; EARLY_READING_MS, or this value when set above 0), an assumption against the never-early "
    "invariant; `punctual probe` measures it in an account.",
    "sqs_poll_latency_ms": f"SQS standard queue -> Lambda event source mapping, measured ({BITESIZED}): "
    "p10/p50/p90/p99 13.7 / 16.2 / 33.8 / 105 ms, fitted (FITS; nothing is known past p99: the log-normal's tail "
    "carries on, no cap). Modelled from the moment a message becomes visible (its delay ended).",
    "cold_start_ms": f"Lambda cold starts, Python ({COLD_STARTS}): the ranges' midpoints, p50 300 ms and p99 "
    "1,000 ms, fitted (FITS; the arm64 discount the source mentions is not taken: the functions import boto3 and "
    "pydantic), capped at 10 s, Lambda's INIT limit (Lambda docs, 'Understanding the Lambda execution environment "
    "lifecycle': 'The Init phase is limited to 10 seconds').",
    "warm_idle_ms": "mikhail.io/serverless/coldstarts/aws/intervals/ (Mikhail Shilkov's cold-start measurements): "
    "'The lifetime of an idle instance is between 5 and 7 minutes' (his 2019-08 post read a fixed 10 minutes; "
    "earlier, 25-60): uniform 5-7 min, drawn each time an environment goes idle. AWS documents none.",
    "esm_initial_concurrency": "Lambda docs, 'Configuring scaling behavior for SQS event source mappings': "
    "'Lambda starts processing five batches at a time with five concurrent invocations'.",
    "esm_scale_per_minute": "Same page: 'increases the number of processes that are reading batches by up to "
    "300 more instances per minute' ('up to': the pessimistic reading takes 60, the rate before the 2023 change).",
    "esm_max_concurrency": "Same page: 'The maximum number of batches that an event source mapping can process "
    "simultaneously is 1,000'.",
    "esm_idle_pollers": "No public figure, marked: Lambda's SQS event source keeps pollers long-polling the queue "
    "while it is empty (Lambda docs, 'Using Lambda with Amazon SQS': 'Lambda polls the queue'; 'starts processing "
    "five batches at a time with five concurrent invocations'), and those ReceiveMessage requests are billed "
    "like any (SQS pricing: every API action is a request; empty receives included). The number of idle pollers "
    "is not documented: 5 (the initial concurrency, the high end of the 2-5 seen reported) in both readings; "
    "0 switches the model off. A fixed monthly cost (reported apart from the price per million tasks). "
    "Punctual's delay queue only (the delivery queue's consumers are the user's); "
    "direct delivery deploys no delay queue: nothing idles there (its control topic, SNS, is push).",
    "esm_idle_wait_s": "SQS long polling: at most 20 s per ReceiveMessage (SQS Developer Guide, 'Setting-up long "
    "polling'); assumption: Lambda's pollers use the maximum, so each makes 3 receives a minute when idle.",
    "stream_latency_ms": f"DynamoDB Streams -> Lambda event source mapping, measured ({BITESIZED}): "
    "p10/p50/p90/p99 118 / 213 / 341 / 552 ms from the write to the handler, fitted (FITS; Lambda docs: 'Lambda "
    "polls shards in your DynamoDB stream for records at a base rate of 4 times per second').",
    "stream_shards": "DynamoDB Streams: a stream shard per table partition (Developer Guide, 'Change data capture "
    "for DynamoDB Streams': shards are created and split with the table's partitions). A new on-demand table "
    "serves 'up to 4,000 writes per second' (Developer Guide, 'On-demand capacity mode'): 4 partitions of "
    "1,000 WCU (assumption: the fewest a table needs for that; a busier table has more).",
    "stream_parallelization": "Lambda docs, 'Lambda parameters for Amazon DynamoDB event source mappings': "
    "ParallelizationFactor, default 1, maximum 10, 'the number of batches to process concurrently from each "
    "shard'; order is kept per partition key. The construct sets 10 (EDITOR_PARALLELIZATION).",
    "api_latency_ms": "No public figure (assumption, the same in both readings): in-region single-digit ms for "
    "DynamoDB ('single-digit millisecond performance'), ~10 ms for SQS, tens of ms for EventBridge control-plane "
    "calls and for SNS Publish (direct delivery's control topic), uniform.",
    "sns_delivery_latency_ms": f"SNS standard topic -> Lambda (asynchronous invocation), measured ({BITESIZED}): "
    "p10/p50/p90/p99 62 / 73 / 125 / 225 ms, fitted (FITS); SNS invokes a subscribed function asynchronously "
    "(Lambda docs, 'Invoking Lambda functions with Amazon SNS notifications'), then a cold start if no environment "
    "is warm. The function's asynchronous invocation settings apply: the same retries, maximum event age and "
    "OnFailure destination as the rule's invocations (poller_retry_delays_ms; direct delivery's destination is "
    "the topic itself).",
    "consumer_memory_mb": "The construct's consumer memory (infra/construct.py CONSUMER_MEMORY_MB). Changing it here "
    "models another size: the client CPU scales with it (one vCPU at 1,769 MB) and so does the price of every "
    "ms the consumer runs or waits (Lambda bills GB-s); docs/benchmark.md, 'The consumer's memory and wake-early'.",
    "poller_memory_mb": "The construct's poller memory (infra/construct.py POLLER_MEMORY_MB), as consumer_memory_mb.",
    "client_cpu_scale": "Measured (bench/measure_client_cpu.py, rerun by anyone; the table and its conditions in "
    "punctual/bench/client_cpu_table.py): time.process_time over 2,000 botocore calls per call type and size "
    "against a local HTTPS server answering canned responses, clients configured as the functions'. Charged to "
    "the invoking function at memory / 1,769 MB of a vCPU (Lambda docs, 'Configuring function memory': one vCPU "
    "at 1,769 MB), never overlapped by a parallel section (the GIL). Assumption: Lambda's vCPU runs botocore as "
    "fast as this machine's core. 1 = as measured, 0 = no CPU model (the figures before issue 29).",
    "async_retry_delays_ms": "Lambda docs, asynchronous invocation: on a function error 'Lambda retries the "
    "function two more times', waiting 1 minute, then 2 minutes (CDK's default for cdk-scheduler's functions).",
    "stream_max_record_age_ms": "Construct: MaximumRecordAgeInSeconds = 60 (punctual/deployment.py); Lambda docs, "
    "'discard records older than the specified age', the OnFailure destination told.",
    "poller_retry_delays_ms": "Lambda docs, asynchronous invocation, with the construct's MaximumEventAgeInSeconds "
    "(120, punctual/deployment.py): the retry after 1 minute fits, the one after 3 minutes does not: the event "
    "then goes to the OnFailure destination (the delay queue; in direct delivery the control topic, whose "
    "message invokes the poller again). The SNS control topic's invocations of the poller get the same.",
    "scheduler_fire_window_ms": "EventBridge Scheduler docs, 'Schedule types': 'All schedule types on EventBridge "
    "Scheduler invoke their targets with 60 second precision ... between 1:00:00 and 1:00:59' (flexible window "
    "OFF). We model the favourable reading: within 60 s after the schedule's time, never before it.",
    "cdk_period_ms": "cdk-scheduler source (github guiyom-e/cdk-scheduler@f5eb62c, cdk-scheduler/lib/index.ts:18, "
    "117): CRON_DELAY_IN_MINUTES = 14, Schedule.rate(14 minutes). Every other behaviour of its model, with file and "
    "line, is in punctual/bench/cdk_scheduler.py and docs/benchmark.md.",
    "cdk_window_ms": "cdk-scheduler source, lib/functions/helpers.ts:52-62 (:future = now + (14 + 1) min) and "
    "extract.ts:37-44 (sk BETWEEN :now AND :future).",
    "cdk_query_limit_bytes": "DynamoDB Query returns at most 1 MB per call; cdk-scheduler's extract.ts:37-44 reads "
    "one page (no LastEvaluatedKey loop). Rows of ~64 B: ~16,384 a page.",
    "cdk_sdk_cpu_scale": "Assumption: the Node SDKs (aws-sdk v2 for SQS, @aws-sdk/client-dynamodb v3) cost the "
    "client CPU botocore costs per call (client_cpu_scale's table), at 128 MB (index.ts: no memorySize). Not "
    "measured for Node; 0 (free) is the reading most favourable to cdk-scheduler and is shown beside.",
    "cdk_refilter_us_per_row": "Measured: node bench/measure_cdk_refilter.js (v20, this machine, 0.59-0.60 us per "
    "row): the re-filter of send.ts:72-79 (records.filter(r => successfulIds.includes(extractIdForSQS(r)))), run "
    "after each chunk of 10 over the whole page; charged at 128 MB's share of a vCPU.",
    "ddb_partition_wcu_per_s": "DynamoDB Developer Guide, 'Troubleshooting throttling for on-demand mode' "
    "(docs.aws.amazon.com/amazondynamodb/latest/developerguide/TroubleshootingThrottlingOnDemand.html) and "
    "'Understanding DynamoDB warm throughput' (warm-throughput-scenarios.html): 'each individual partition is "
    "limited to 1,000 write units per second and 3,000 read units per second', on-demand tables included. "
    "Over it DynamoDB returns ProvisionedThroughputExceededException with ThrottlingReasons "
    "TableWriteKeyRangeThroughputExceeded / TableReadKeyRangeThroughputExceeded ('Key range throughput "
    "exceeded (hot partitions)', throttling-key-range-limit-exceeded-mitigation.html: 'The request rate directed "
    "at a specific partition key value has exceeded the internal partition-level throughput limits'; API "
    "reference ThrottlingReason). Modelled per partition key value (Punctual's tasks share one); "
    "DynamoDB may split a hot key's item collection by sort key ('split for heat', undocumented limits), which "
    "the model ignores: a conservative reading. BatchWriteItem returns the items over the limit in "
    "UnprocessedItems and throttles the call only when none was admitted (BatchWriteItem API reference).",
    "ddb_partition_rcu_per_s": "Same pages: 3,000 read units per second per partition. The same page on "
    "on-demand throttling says 'or a linear combination of both'; the key-range page says reads and writes are "
    "throttled independently: the model keeps two independent buckets (the lenient reading).",
    "ddb_partition_burst_ms": "Assumption: a partition absorbs at most 1 s of its limit at once (token bucket of "
    "1 s); DynamoDB's documented burst capacity (300 s of unused capacity) is a table-level provisioned-mode "
    "feature and never exceeds the partition's maximum.",
    "sdk_retry_base_ms": "botocore's retry config for DynamoDB (botocore/data/_retry.json, legacy mode, boto3's "
    "default): max_attempts 10, exponential delay base 0.05 s, growth factor 2, on ThrottlingException and "
    "ProvisionedThroughputExceededException. The bench's producer keeps retrying at the last delay after the "
    "SDK's attempts (an application retrying what the SDK raised), so no task is dropped; "
    "user_puts_past_sdk_attempts counts the puts that would have raised to the producer.",
    "events_control_tps": "CloudWatch Events quotas (docs.aws.amazon.com/AmazonCloudWatch/latest/events/"
    "cloudwatch_limits_cwe.html): 'API requests: Up to 50 requests per second for all CloudWatch Events API "
    "operations except PutEvents'; EventBridge quotas: all other API requests are limited to 50 requests per "
    "second by default (adjustable). Over it EventBridge answers ThrottlingException; the handlers' retry policy "
    "(punctual.core.retry: 6 attempts, full-jitter backoff from 50 ms) backs off. Modelled as one bucket for the "
    "account, shared by every control-plane API (the stricter reading of 'for all ... operations'; per-API "
    "buckets would be more lenient), counted as events_throttled:<fn>:<Op>.",
    "events_control_burst_ms": "Assumption: the bucket holds 1 s of the quota (50 requests); AWS documents the "
    "rate, not the burst.",
    "delay_visibility_ms": "Construct: DELAY_QUEUE_VISIBILITY = 6 x CONSUMER_TIMEOUT (AWS guidance for SQS "
    "event sources).",
}
