"""Settings every function reads from its environment.

``ENV`` is the single source of truth for the variable names: the CDK construct
imports it to set them, the handlers read them through :func:`load_settings`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from .log_levels import DEFAULT_LEVEL, check_level
from .shards import MAX_SHARDS, partition_for, partitions, task_id_of

MAX_DELAY_SECONDS = 900  # SQS DelaySeconds ceiling
MAX_GROUP_SPAN_MS = 10_000  # with max_wait and a group's extra wake, within the consumer's 30 s
META_PK = "__punctual__"  # partition of internal bookkeeping rows (never a task)
META_ARM_SK = "rule"
# The delivery fences' items in the meta partition carry their expiry (epoch seconds) in this
# attribute; the construct enables DynamoDB's TTL on it (a brought table should too; without TTL
# the items, one per partition and due second delivered, stay). docs/architecture.md,
# "Cancellation never lies".
ATTR_EXPIRES = "punctual_expires"
# PutRule replaces every attribute it is not given: the construct and the arming code share this.
RULE_DESCRIPTION = "Punctual poller trigger: a one-shot cron re-armed by Punctual; do not edit"
# Shapes of the delivery-queue body: Punctual's DeliveredEvent, or cdk-scheduler's
# {"publicationTimestamp", "payload" as DynamoDB JSON} (docs/migrating.md, "The delivered event").
EVENT_FORMATS = ("punctual", "cdk-scheduler")
# Settings.delivery: "consumer" (the delay queue and the consumer deliver on the ms, cancellable
# until then) or "direct" (the poller and the editor send each event to the delivery queue
# themselves, with DelaySeconds: docs/architecture.md, "Direct delivery").
DELIVERY_MODES = ("consumer", "direct")
# The construct's default lead in direct delivery: the poll claims, sends and deletes each row (two
# writes a row where the consumer mode's poll writes one), so a cluster needs a poll started earlier:
# the 50,000 burst (fake, seed 1) is p99 29.4 s late with a lead of 300 s, 331 ms with 600 s.
DIRECT_LEAD_SECONDS = 600


@dataclass(frozen=True)
class Settings:
    table_name: str = "punctual"
    partition_key_value: str = "scheduler"
    # Tasks are spread over this many partitions (core/shards.py); 1 = all under
    # partition_key_value, cdk-scheduler's row format. Raise it, never lower it.
    shards: int = 1
    delay_queue_url: str = ""
    # Direct delivery's control channel (no delay queue there): an SNS topic the poller is subscribed
    # to. Poll requests are published to it; the OnFailure destination of the poller's invocations and
    # of the editor's stream is this topic (docs/architecture.md, "Direct delivery").
    control_topic_arn: str = ""
    delivery_queue_url: str = ""
    rejected_queue_url: str = ""
    rule_name: str = "punctual-poller"
    # A poll sends every task due within this many seconds of its start (<= 900).
    window_seconds: int = 900
    # The editor sends a row itself when it is due within this many seconds of being written
    # (at most window_seconds: fast_path_ms), or sooner than any poll could still be armed for
    # it; other rows wait for a poll, which sends everything due together in shared messages
    # (docs/architecture.md, "Groups").
    fast_path_seconds: int = 900
    # The rule is armed this long before the next unsent task is due; it must cover EventBridge
    # firing anywhere in the minute plus the target's start delay, and the poll's own work before
    # the first task is due: a claim per row, ~1 ms of CPU each at 1,024 MB, so 50,000 rows due
    # together need ~95 s (120 s left a 50,000 burst p99 54 s late; docs/benchmark.md).
    lead_seconds: int = 300
    # A sent row still present this long after it should have been visible is an orphan.
    orphan_grace_seconds: int = 300
    # Sends of one row before it is moved to the rejected queue as undeliverable.
    max_attempts: int = 5
    # Consumer: a message this close to due waits in-process; farther, it is put back (to whole
    # seconds: a put-back can make it late). At least wake_early_ms + 1 s, so that a message SQS
    # shows up to a second before its delay ends (the benchmark's early reading) still waits.
    max_wait_ms: int = 2500
    # Delay-queue messages are planned to become visible up to this long before due;
    # the consumer waits the rest, so delivery is on the ms rather than up to 1 s late.
    # 0 = DelaySeconds rounded up to due (never visible early, ~500 ms mean lateness). 1,200: a
    # message visible as late as it may be (due - 200 ms) is still picked up before due
    # (docs/benchmark.md, "The wake-early curve"); 1,000 costs ~11% less and is ~180 ms late at p99.
    wake_early_ms: int = 1200
    # The poll sends its messages each at the moment that makes whole seconds of DelaySeconds land
    # it this long before its due ms (at most ``align_step_ms`` later), instead of anywhere in the
    # second after due - wake_early_ms: the consumer waits less (Lambda bills each ms) and is not
    # started after due (docs/architecture.md, "Sends aligned to the due ms"). 0 = off. Only in a
    # poll with at least ``align_min_messages`` such messages: the poll then runs up to a second
    # longer, which costs more than it saves for fewer.
    aligned_wake_ms: int = 500
    align_step_ms: int = 100
    align_min_messages: int = 8
    # A meta arming older than this is treated as dead (its poll never ran).
    stale_arm_seconds: int = 900
    # One poll at a time: a poll holds a lease in the meta row (``polling_ms``) for this long; a
    # poll that finds a live lease defers to it (docs/architecture.md, "One poll at a time"). It
    # must be at least the poller's Lambda timeout (the construct sets it to that, 300 s).
    poll_lease_seconds: int = 300
    log_payloads: bool = False
    metrics_namespace: str = "Punctual"
    # Value of the "Instance" dimension on every metric: tells two schedulers in one account apart.
    instance_name: str = "punctual"
    send_workers: int = 16
    # Rows due within this many ms of a group's first row share one delay-queue message (one
    # send, receive and delete, one consumer invocation; docs/architecture.md, "Groups").
    # 0 = one message per row. At most MAX_GROUP_SPAN_MS (the consumer waits through a group).
    group_span_ms: int = 1000
    # A consumer invocation delivers at most this many rows of the messages it received at once
    # (more when its first message alone holds more); it hands the other messages straight back to
    # the delay queue for other invocations (consumer_rules.hand_off; docs/architecture.md "Groups").
    consumer_max_rows: int = 1000
    # How tasks reach the delivery queue: one of DELIVERY_MODES. "direct": no delay queue and no
    # consumer; a task is sent within its window before due (cancellable until then), visible on
    # the delivery queue ``direct_early_margin_ms`` after its due ms, or at most ``align_step_ms``
    # after that (docs/architecture.md, "Direct delivery").
    delivery: str = "consumer"
    # Direct delivery: a sender waits at most this long for an event's phase (the moment that makes
    # it visible on its due ms + direct_early_margin_ms); an event whose phase is further away is sent
    # at once, visible less than 1,000 - this many ms after that. 1,000: always wait (lateness <=
    # align_step_ms past the margin); lower trades the senders' billed wait for lateness. 750 (measured
    # with no margin): steady 100,000 p99 311 ms, max 362 ms, $5.60 per million, against 109 / 258 ms,
    # $6.44 at 1,000 (docs/benchmark.md, "Direct delivery").
    direct_max_wait_ms: int = 750
    # Direct delivery: each event sent with DelaySeconds is made visible this many ms after its due ms
    # under an exact SQS delay timer, so a timer up to this much early still never shows it before its
    # due ms (docs/architecture.md, "Direct delivery": what never-early rests on; `punctual probe`
    # measures a deployment's timer and says whether this covers it). Every such event is this much
    # later. 1,000: the benchmark's early reading (up to 1 s early) then delivers 0 early (steady 10,000
    # and burst 20,000, 5 seeds; 9,441 and 16,159 early at 0), at the price of direct mode's p99 < 500
    # ms: 1,258 / 1,330 ms on time (258 / 330 at 0; docs/benchmark.md, "The early margin"). At most
    # 901,000 - window_seconds x 1,000: the longest DelaySeconds (900 s) must still reach due + margin
    # for a task at the window's end.
    direct_early_margin_ms: int = 1000
    # Shape of each delivery-queue message body: one of EVENT_FORMATS.
    event_format: str = "punctual"
    # Log lines below this level are not written (log_levels.LEVELS; metrics always are).
    log_level: str = DEFAULT_LEVEL
    extra: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not 1 <= self.window_seconds <= MAX_DELAY_SECONDS:
            raise ValueError(f"window_seconds must be 1..{MAX_DELAY_SECONDS}, got {self.window_seconds}")
        if self.fast_path_seconds < 0:
            raise ValueError(f"fast_path_seconds must be >= 0, got {self.fast_path_seconds}")
        if self.lead_seconds < 0:
            raise ValueError("lead_seconds must be >= 0")
        if self.window_seconds < self.lead_seconds + 60:
            # The rule fires anywhere in its minute: a poll armed lead seconds before a
            # task may start up to lead + 60 s before it, and must still reach it.
            raise ValueError(
                f"window_seconds ({self.window_seconds}) must be >= lead_seconds + 60 "
                f"({self.lead_seconds + 60})"
            )
        if not 0 <= self.wake_early_ms <= self.max_wait_ms:
            raise ValueError(f"wake_early_ms must be 0..max_wait_ms ({self.max_wait_ms}), got {self.wake_early_ms}")
        if not 0 <= self.aligned_wake_ms <= self.max_wait_ms:
            raise ValueError(f"aligned_wake_ms must be 0..max_wait_ms ({self.max_wait_ms}), got {self.aligned_wake_ms}")
        if not 1 <= self.align_step_ms <= 1000:
            raise ValueError(f"align_step_ms must be 1..1000, got {self.align_step_ms}")
        if self.align_min_messages < 1:
            raise ValueError(f"align_min_messages must be >= 1, got {self.align_min_messages}")
        if self.orphan_grace_seconds < 0:
            raise ValueError("orphan_grace_seconds must be >= 0")
        if self.poll_lease_seconds < 1:
            raise ValueError("poll_lease_seconds must be >= 1")
        if self.send_workers < 1:
            raise ValueError("send_workers must be >= 1")
        if not 0 <= self.group_span_ms <= MAX_GROUP_SPAN_MS:
            raise ValueError(f"group_span_ms must be 0..{MAX_GROUP_SPAN_MS}, got {self.group_span_ms}")
        if self.consumer_max_rows < 1:
            raise ValueError(f"consumer_max_rows must be >= 1, got {self.consumer_max_rows}")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if self.event_format not in EVENT_FORMATS:
            raise ValueError(f"event_format must be one of {', '.join(map(repr, EVENT_FORMATS))}, "
                             f"got {self.event_format!r}")
        if not 0 <= self.direct_max_wait_ms <= 1000:
            raise ValueError(f"direct_max_wait_ms must be 0..1000, got {self.direct_max_wait_ms}")
        if not 0 <= self.direct_early_margin_ms <= self.max_direct_early_margin_ms:
            raise ValueError(f"direct_early_margin_ms must be 0..{self.max_direct_early_margin_ms} (901,000 - the "
                             f"window in ms), got {self.direct_early_margin_ms}")
        if self.delivery not in DELIVERY_MODES:
            raise ValueError(f"delivery must be one of {', '.join(map(repr, DELIVERY_MODES))}, "
                             f"got {self.delivery!r}")
        if self.partition_key_value == META_PK:
            raise ValueError(f"partition_key_value {META_PK!r} is reserved")
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValueError(f"shards must be 1..{MAX_SHARDS}, got {self.shards}")
        check_level(self.log_level)

    @property
    def partitions(self) -> tuple[str, ...]:
        """Every partition key value that holds tasks (core/shards.py)."""
        return partitions(self.partition_key_value, self.shards)

    def partition_for(self, task_id: str) -> str:
        """The partition key value a task with ``task_id`` is written under."""
        return partition_for(self.partition_key_value, self.shards, task_id)

    def partition_for_key(self, sk: str) -> str:
        """The partition key value of the task with sort key ``sk`` (``"<epoch-ms>#<id>"``)."""
        return self.partition_for(task_id_of(sk))

    @property
    def direct(self) -> bool:
        """Direct delivery: the poller and the editor send each event to the delivery queue."""
        return self.delivery == "direct"

    @property
    def max_direct_early_margin_ms(self) -> int:
        """The largest direct_early_margin_ms: a task due at the window's end, sent at once, is still
        visible at due + margin with the longest DelaySeconds from a phase in the next second."""
        return (MAX_DELAY_SECONDS + 1) * 1000 - self.window_ms

    @property
    def window_ms(self) -> int:
        return self.window_seconds * 1000

    @property
    def fast_path_ms(self) -> int:
        return min(self.fast_path_seconds, self.window_seconds) * 1000

    @property
    def lead_ms(self) -> int:
        return self.lead_seconds * 1000

    @property
    def poll_lease_ms(self) -> int:
        return self.poll_lease_seconds * 1000

    @property
    def orphan_grace_ms(self) -> int:
        return self.orphan_grace_seconds * 1000


# attribute -> environment variable name
ENV: dict[str, str] = {
    "table_name": "PUNCTUAL_TABLE_NAME",
    "partition_key_value": "PUNCTUAL_PARTITION_KEY_VALUE",
    "shards": "PUNCTUAL_SHARDS",
    "delay_queue_url": "PUNCTUAL_DELAY_QUEUE_URL",
    "control_topic_arn": "PUNCTUAL_CONTROL_TOPIC_ARN",
    "delivery_queue_url": "PUNCTUAL_DELIVERY_QUEUE_URL",
    "rejected_queue_url": "PUNCTUAL_REJECTED_QUEUE_URL",
    "rule_name": "PUNCTUAL_RULE_NAME",
    "window_seconds": "PUNCTUAL_WINDOW_SECONDS",
    "lead_seconds": "PUNCTUAL_LEAD_SECONDS",
    "orphan_grace_seconds": "PUNCTUAL_ORPHAN_GRACE_SECONDS",
    "max_attempts": "PUNCTUAL_MAX_ATTEMPTS",
    "max_wait_ms": "PUNCTUAL_MAX_WAIT_MS",
    "wake_early_ms": "PUNCTUAL_WAKE_EARLY_MS",
    "aligned_wake_ms": "PUNCTUAL_ALIGNED_WAKE_MS",
    "align_step_ms": "PUNCTUAL_ALIGN_STEP_MS",
    "align_min_messages": "PUNCTUAL_ALIGN_MIN_MESSAGES",
    "fast_path_seconds": "PUNCTUAL_FAST_PATH_SECONDS",
    "stale_arm_seconds": "PUNCTUAL_STALE_ARM_SECONDS",
    "poll_lease_seconds": "PUNCTUAL_POLL_LEASE_SECONDS",
    "log_payloads": "PUNCTUAL_LOG_PAYLOADS",
    "metrics_namespace": "PUNCTUAL_METRICS_NAMESPACE",
    "instance_name": "PUNCTUAL_INSTANCE_NAME",
    "send_workers": "PUNCTUAL_SEND_WORKERS",
    "group_span_ms": "PUNCTUAL_GROUP_SPAN_MS",
    "consumer_max_rows": "PUNCTUAL_CONSUMER_MAX_ROWS",
    "event_format": "PUNCTUAL_EVENT_FORMAT",
    "delivery": "PUNCTUAL_DELIVERY",
    "direct_max_wait_ms": "PUNCTUAL_DIRECT_MAX_WAIT_MS",
    "direct_early_margin_ms": "PUNCTUAL_DIRECT_EARLY_MARGIN_MS",
    "log_level": "PUNCTUAL_LOG_LEVEL",
}

# What each function cannot run without (attribute names of Settings): checked when the function
# builds its dependencies (runtime.default_deps), i.e. on its cold start, so a missing variable is
# one clear error instead of a function that starts and then fails every record. The consumer
# finds the delay queue from its event when PUNCTUAL_DELAY_QUEUE_URL is unset (put-backs only).
REQUIRED: dict[str, tuple[str, ...]] = {
    "poller": ("table_name", "delay_queue_url", "rejected_queue_url", "rule_name"),
    "consumer": ("table_name", "delivery_queue_url", "rejected_queue_url"),
    "editor": ("table_name", "delay_queue_url", "rejected_queue_url", "rule_name"),
}
# In direct delivery the poller and the editor send to the delivery queue and ask for polls through
# the control topic; there is no delay queue.
_DIRECT = {"delay_queue_url": ("delivery_queue_url", "control_topic_arn")}


class MissingSetting(ValueError):
    """A setting a function needs is not in its environment; the message names the variable."""


def check_required(environ: Mapping[str, str], function: str) -> None:
    """:class:`MissingSetting` naming the first variable ``function`` needs (:data:`REQUIRED`) that
    ``environ`` lacks or leaves blank (a default such as table "punctual" would be a wrong guess)."""
    direct = environ.get(ENV["delivery"], "").strip() == "direct"
    needed = [a for attr in REQUIRED[function] for a in (_DIRECT.get(attr, (attr,)) if direct else (attr,))]
    for attr in needed:
        if not environ.get(ENV[attr], "").strip():
            raise MissingSetting(
                f"{ENV[attr]} is not set: the {function} function needs it (the Scheduler construct "
                f"sets it; README, 'Settings')"
            )


def _coerce(kind: type, raw: str) -> object:
    if kind is bool:
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if kind is int:
        return int(raw)
    return raw


def load_settings(environ: Mapping[str, str] | None = None, function: str | None = None,
                  **overrides: object) -> Settings:
    """Settings from ``environ`` (default: the process environment); with ``function`` (a key of
    :data:`REQUIRED`), first check that it has every variable that function needs."""
    environ = os.environ if environ is None else environ
    if function is not None:
        check_required(environ, function)
    types = {f.name: f.type for f in fields(Settings)}
    values: dict[str, object] = {}
    for attr, var in ENV.items():
        if var in environ:
            kind = {"int": int, "bool": bool}.get(str(types[attr]), str)
            try:
                values[attr] = _coerce(kind, environ[var])
            except ValueError:
                raise ValueError(f"{var}={environ[var]!r}: expected an integer") from None
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def to_environment(settings: Settings, only: tuple[str, ...] | None = None) -> dict[str, str]:
    """Inverse of :func:`load_settings` (used by the construct and the local stack)."""
    out = {}
    for attr, var in ENV.items():
        if only is not None and attr not in only:
            continue
        value = getattr(settings, attr)
        out[var] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out
