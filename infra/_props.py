"""The ``Scheduler``'s props, checked in one place: :func:`validate_props` runs every check the
constructor makes (a new prop's check goes there), in this order, and returns what the builders
read (:class:`Props`). The props themselves are documented on :class:`infra.construct.Scheduler`.

Most checks are the functions' own: constructing :class:`~punctual.core.config.Settings` raises the
``ValueError`` a function would raise at start-up. The others are the construct's: Duration props
(and their deprecated int aliases), the alarms' thresholds, the metrics' instance name, a brought
table's keys and stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Annotations, Duration, Names, Stack, Token
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from punctual.core.config import DIRECT_LEAD_SECONDS, Settings
from punctual.deployment import DELAY_QUEUE_VISIBILITY_S, POLLER_TIMEOUT_S

DEFAULTS = Settings()
DEFAULT_LATENESS_ALARM_THRESHOLD = Duration.seconds(1)
# The delay queue's oldest message: a pointer waits up to the window (DelaySeconds <= 900 s) before
# it is visible, then is received at once. SQS does not document whether the age counts the delay;
# counting it, a healthy queue stays below window + one visibility timeout (900 + 180 s), and a
# message older than 20 minutes has been retried or is not being received.
DEFAULT_DELAY_QUEUE_AGE_ALARM_THRESHOLD = Duration.minutes(20)
# An alarm's dimension value is 1-255 characters (AWS::CloudWatch::Alarm Dimension, CloudFormation
# reference; PutMetricData allows 1024 and ASCII only, with a non-whitespace character).
MAX_INSTANCE_NAME = 255
# Props that were ints with the unit in the name, kept as deprecated aliases of the Duration props:
# alias -> (the Duration prop, the alias's unit as a Duration factory name).
DEPRECATED_INT_PROPS: dict[str, tuple[str, str]] = {
    "window_seconds": ("window", "seconds"),
    "lead_seconds": ("lead", "seconds"),
    "orphan_grace_seconds": ("orphan_grace", "seconds"),
    "lateness_alarm_threshold_ms": ("lateness_alarm_threshold", "millis"),
}
# The props that take a Duration (the local stack's JSON props give them as seconds or ISO-8601).
DURATION_PROPS = ("window", "lead", "orphan_grace", "lateness_alarm_threshold", "delay_queue_age_alarm_threshold")
# A brought table (``table=``) must have the key schema and stream view the functions read.
TABLE_KEYS = (("pk", "HASH"), ("sk", "RANGE"))
TABLE_STREAM_VIEW = dynamodb.StreamViewType.NEW_AND_OLD_IMAGES


@dataclass(frozen=True)
class Props:
    """The props once checked, as the builders read them."""

    # the functions' settings; the constructor fills in the names of the resources it creates
    settings: Settings
    lateness_alarm_threshold_ms: float
    delay_queue_age_alarm_threshold: Duration


def validate_props(
    scope: Construct,
    *,
    partition_key_value: str,
    shards: int,
    window: Duration | None,
    lead: Duration | None,
    orphan_grace: Duration | None,
    lateness_alarm_threshold: Duration | None,
    delay_queue_age_alarm_threshold: Duration | None,
    max_attempts: int,
    log_payloads: bool,
    metrics_namespace: str,
    instance_name: str | None,
    event_format: str,
    delivery: str,
    table: dynamodb.ITable | None,
    deprecated: dict[str, int | None],
) -> Props:
    """Every prop check, or the ``ValueError`` of the first that fails. ``scope``: the ``Scheduler``
    (deprecation warnings and the default instance name are its); ``deprecated``: the int aliases
    (:data:`DEPRECATED_INT_PROPS`) by name, None when not given."""
    durations = _durations(scope, {"window": window, "lead": lead, "orphan_grace": orphan_grace,
                                   "lateness_alarm_threshold": lateness_alarm_threshold}, deprecated, delivery)
    window_seconds = _whole_seconds("window", durations["window"])
    lead_seconds = _whole_seconds("lead", durations["lead"])
    orphan_grace_seconds = _whole_seconds("orphan_grace", durations["orphan_grace"])
    delay_age_threshold = delay_queue_age_alarm_threshold or DEFAULT_DELAY_QUEUE_AGE_ALARM_THRESHOLD
    if delivery != "direct":  # (an invalid value is refused by Settings below)
        _check_delay_age_threshold(delay_age_threshold, window_seconds)
    settings = Settings(
        partition_key_value=partition_key_value,
        shards=shards,
        window_seconds=window_seconds,
        lead_seconds=lead_seconds,
        orphan_grace_seconds=orphan_grace_seconds,
        max_attempts=max_attempts,
        poll_lease_seconds=POLLER_TIMEOUT_S,  # a poll's lease lasts as long as a poll can: its Lambda timeout
        log_payloads=log_payloads,
        metrics_namespace=metrics_namespace,
        instance_name=_instance_name(scope, instance_name),
        event_format=event_format,
        delivery=delivery,
    )
    if orphan_grace_seconds <= DELAY_QUEUE_VISIBILITY_S:
        raise ValueError(
            f"orphan_grace ({orphan_grace_seconds} s) must exceed the delay queue's visibility "
            f"timeout ({DELAY_QUEUE_VISIBILITY_S} s): a message being retried would be "
            "taken for lost and resent"
        )
    if table is not None:
        check_table(scope, table)
    return Props(settings, durations["lateness_alarm_threshold"].to_milliseconds(), delay_age_threshold)


def _durations(scope: Construct, given: dict[str, Duration | None], aliases: dict[str, int | None],
               delivery: str) -> dict[str, Duration]:
    """Each Duration prop from itself, else from its deprecated int alias (with a deprecation
    warning on ``scope``), else its default (``lead``: longer in direct delivery,
    DIRECT_LEAD_SECONDS); both given is an error."""
    lead_s = DIRECT_LEAD_SECONDS if delivery == "direct" else DEFAULTS.lead_seconds
    defaults = {"window": Duration.seconds(DEFAULTS.window_seconds), "lead": Duration.seconds(lead_s),
                "orphan_grace": Duration.seconds(DEFAULTS.orphan_grace_seconds),
                "lateness_alarm_threshold": DEFAULT_LATENESS_ALARM_THRESHOLD}
    out = {name: value for name, value in given.items() if value is not None}
    for alias, value in aliases.items():
        if value is None:
            continue
        name, unit = DEPRECATED_INT_PROPS[alias]
        if name in out:
            raise ValueError(f"give {name} or its deprecated alias {alias}, not both")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{alias} must be a number, got {value!r} (better: {name}=Duration...)")
        if value < 0:
            raise ValueError(f"{alias} must not be negative, got {value}")
        Annotations.of(scope).add_deprecation(f"punctual.cdk.Scheduler#{alias}",
                                              f"use {name}=Duration.{unit}({value})")
        out[name] = getattr(Duration, unit)(value)
    return {name: out.get(name, default) for name, default in defaults.items()}


def _whole_seconds(name: str, duration: Duration) -> int:
    seconds = duration.to_seconds(integral=False)
    if Token.is_unresolved(seconds) or seconds != int(seconds):
        raise ValueError(f"{name} must be a whole number of seconds, got {duration.to_human_string()}")
    return int(seconds)


def _check_delay_age_threshold(threshold: Duration, window_seconds: int) -> None:
    """The delay queue's age alarm must not fire on pointers waiting, as designed, up to the window."""
    if threshold.to_seconds(integral=False) <= window_seconds + DELAY_QUEUE_VISIBILITY_S:
        raise ValueError(
            f"delay_queue_age_alarm_threshold ({threshold.to_human_string()}) must exceed the "
            f"window ({window_seconds} s) + the delay queue's visibility timeout "
            f"({DELAY_QUEUE_VISIBILITY_S} s): pointers wait up to the window by design"
        )


def _instance_name(scope: Construct, instance_name: str | None) -> str:
    """The given name, else one unique to the construct (its path in the app); a CloudWatch dimension value."""
    if instance_name is None:
        instance_name = Names.unique_resource_name(scope, max_length=64, separator="-")
    if not (instance_name.strip() and instance_name.isascii() and instance_name.isprintable()
            and len(instance_name) <= MAX_INSTANCE_NAME):
        raise ValueError(
            f"instance_name must be 1..{MAX_INSTANCE_NAME} printable ASCII characters, not all blank "
            f"(a CloudWatch dimension value), got {instance_name!r}"
        )
    return instance_name


def check_table(scope: Construct, table: dynamodb.ITable) -> None:
    """A brought table must carry what the functions read: ``pk``/``sk`` string keys and a stream
    with new and old images (the editor tells a released claim from a new row by the old image).
    Checked when the table is defined in this app; an imported one is taken on trust (a warning on
    ``scope``)."""
    if table.table_stream_arn is None:
        raise ValueError(
            "table= needs a DynamoDB stream (view NEW_AND_OLD_IMAGES): create it with "
            "stream=StreamViewType.NEW_AND_OLD_IMAGES, or import it with "
            "Table.from_table_attributes(..., table_stream_arn=...)"
        )
    cfn = table.node.default_child
    if not isinstance(cfn, dynamodb.CfnTable):
        Annotations.of(scope).add_warning_v2(
            "punctual:table-unchecked",
            "the brought table's keys and stream view cannot be read here: it must have keys pk (S, hash) "
            "and sk (S, range) and a NEW_AND_OLD_IMAGES stream",
        )
        return
    stack = Stack.of(scope)
    # resolved to CloudFormation's shape: [{"attributeName", "keyType"}], {"streamViewType"}
    keys = tuple((k["attributeName"], k["keyType"]) for k in stack.resolve(cfn.key_schema))
    types = {a["attributeName"]: a["attributeType"] for a in stack.resolve(cfn.attribute_definitions) or []}
    view = (stack.resolve(cfn.stream_specification) or {}).get("streamViewType")
    if keys != TABLE_KEYS or any(types.get(name) != "S" for name, _ in TABLE_KEYS):
        raise ValueError(f"table= must have keys pk (string, hash) and sk (string, range), got {keys} {types}")
    if view != TABLE_STREAM_VIEW.value:
        raise ValueError(
            f"table= must have a {TABLE_STREAM_VIEW.value} stream, got {view}: the editor tells a released "
            "claim from a new row by the old image (cdk-scheduler creates NEW_IMAGE; docs/migrating.md)"
        )
