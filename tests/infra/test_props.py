"""Duration props and their deprecated int aliases, the dashboard, and bringing an existing table."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Duration, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Annotations, Match, Template

from infra import Scheduler
from punctual.core.config import ENV

from .conftest import FAST_APP, NO_BUNDLING


def _stack(name: str = "P") -> Stack:
    return Stack(App(context=NO_BUNDLING, **FAST_APP), name)


def _env(scheduler: Scheduler) -> dict[str, str]:
    (fn,) = [f for f in Template.from_stack(Stack.of(scheduler)).find_resources("AWS::Lambda::Function").values()
             if f["Properties"].get("Handler", "").endswith("poller.handler.handler")]
    return fn["Properties"]["Environment"]["Variables"]


# ---- Duration props ------------------------------------------------------------------------------

def test_duration_props_reach_the_functions_settings():
    s = Scheduler(_stack(), "S", window=Duration.minutes(10), lead=Duration.seconds(90),
                  orphan_grace=Duration.minutes(6))
    assert (s.settings.window_seconds, s.settings.lead_seconds, s.settings.orphan_grace_seconds) == (600, 90, 360)
    env = _env(s)
    assert (env[ENV["window_seconds"]], env[ENV["lead_seconds"]], env[ENV["orphan_grace_seconds"]]) == \
        ("600", "90", "360")


def test_deprecated_int_aliases_still_work_and_warn():
    stack = _stack()
    s = Scheduler(stack, "S", window_seconds=600, lead_seconds=90, orphan_grace_seconds=360,
                  lateness_alarm_threshold_ms=250)
    assert (s.settings.window_seconds, s.settings.lead_seconds, s.settings.orphan_grace_seconds) == (600, 90, 360)
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::CloudWatch::Alarm", {"MetricName": "LatenessMs", "Threshold": 250})
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("deprecated"))
    texts = " ".join(str(w.entry.data) for w in warnings)
    for alias, hint in (("window_seconds", "window=Duration.seconds(600)"), ("lead_seconds", "lead="),
                        ("orphan_grace_seconds", "orphan_grace="),
                        ("lateness_alarm_threshold_ms", "lateness_alarm_threshold=Duration.millis(250)")):
        assert alias in texts and hint in texts, alias


def test_new_names_raise_no_deprecation_warning():
    stack = _stack()
    Scheduler(stack, "S", window=Duration.minutes(10), lateness_alarm_threshold=Duration.millis(400))
    assert not Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("deprecated"))
    Template.from_stack(stack).has_resource_properties("AWS::CloudWatch::Alarm",
                                                       {"MetricName": "LatenessMs", "Threshold": 400})


@pytest.mark.parametrize(
    "props, message",
    [
        ({"window": Duration.minutes(10), "window_seconds": 600}, "not both"),
        ({"window": Duration.millis(90_500)}, "whole number of seconds"),
        ({"lead": Duration.minutes(20)}, "lead_seconds"),  # > window - 60 s: the functions' own rule
        ({"orphan_grace": Duration.minutes(3)}, "visibility timeout"),
        ({"window_seconds": "600"}, "must be a number"),
        ({"lead_seconds": -1}, "must not be negative"),
        ({"delay_queue_age_alarm_threshold": Duration.minutes(18)}, "window"),  # 1080 s = 900 + 180: too low
    ],
)
def test_bad_duration_props_are_refused(props, message):
    with pytest.raises(ValueError, match=message):
        Scheduler(_stack(), "S", **props)


def test_the_delay_queue_age_threshold_is_not_checked_in_direct_delivery():
    """No delay queue, no alarm on its age: a threshold given is not held against the window."""
    s = Scheduler(_stack(), "S", delivery="direct", delay_queue_age_alarm_threshold=Duration.minutes(18))
    assert "DelayQueueAgeAlarm" not in [a.node.id for a in s.alarms]


def test_delay_queue_age_alarm_threshold_follows_the_window():
    stack = _stack()
    Scheduler(stack, "S", window=Duration.minutes(5), lead=Duration.minutes(1),
              delay_queue_age_alarm_threshold=Duration.minutes(10))
    Template.from_stack(stack).has_resource_properties(
        "AWS::CloudWatch::Alarm", {"MetricName": "ApproximateAgeOfOldestMessage", "Threshold": 600})


# ---- dashboard -------------------------------------------------------------------------------------

def test_no_dashboard_by_default(demo):
    demo.template.resource_count_is("AWS::CloudWatch::Dashboard", 0)
    assert demo.scheduler.dashboard is None


def test_dashboard_shows_this_instance(custom):
    """The widgets read this scheduler's metrics (its namespace and Instance value), its delay queue and
    its three functions."""
    (dash,) = custom.resources("AWS::CloudWatch::Dashboard").values()
    body = custom.stack.resolve(dash["Properties"]["DashboardBody"])
    text = str(body)
    for expected in ("Lateness (ms)", "LatenessMs", "Delivered", "RejectedRows", "jobs-prod",
                     "ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesDelayed",
                     custom.logical_id(custom.scheduler.delay_queue), "Throttles", "Duration"):
        assert expected in text, expected
    for fn in custom.scheduler.functions:
        assert custom.logical_id(fn) in text
    assert custom.scheduler.dashboard is not None
    assert "Alarms" not in text  # custom has alarms=False: no alarm-status widget


# ---- table= -----------------------------------------------------------------------------------------

def _table(stack: Stack, view: dynamodb.StreamViewType | None = dynamodb.StreamViewType.NEW_AND_OLD_IMAGES,
           sort_key: str = "sk", **kw) -> dynamodb.Table:
    return dynamodb.Table(stack, "Existing", partition_key=dynamodb.Attribute(name="pk", type=dynamodb.AttributeType.STRING),
                          sort_key=dynamodb.Attribute(name=sort_key, type=dynamodb.AttributeType.STRING),
                          stream=view, **kw)


def test_a_brought_table_is_used_not_created():
    """A cdk-scheduler-like table (pk/sk strings, now with new and old images, its own key): no table
    of Punctual's, the functions read and write it, the editor reads its stream, all use its key."""
    stack = _stack()
    key = kms.Key(stack, "TableKey", enable_key_rotation=True)
    table = _table(stack, encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED, encryption_key=key)
    s = Scheduler(stack, "S", table=table)
    assert s.table is table and s.scheduler_table is table
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::DynamoDB::Table", 1)
    table_id = stack.get_logical_id(table.node.default_child)
    assert s.settings.table_name == table.table_name
    assert _env(s)[ENV["table_name"]] == {"Ref": table_id}
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "EventSourceArn": {"Fn::GetAtt": [table_id, "StreamArn"]}})
    key_id = stack.get_logical_id(key.node.default_child)
    policies = template.find_resources("AWS::IAM::Policy")
    for fn in s.functions:
        role_id = stack.get_logical_id(fn.role.node.default_child)
        statements = [st for p in policies.values() if {"Ref": role_id} in p["Properties"]["Roles"]
                      for st in p["Properties"]["PolicyDocument"]["Statement"]]
        resources = str([st["Resource"] for st in statements])
        assert table_id in resources, fn.node.id
        assert key_id in resources, fn.node.id  # the table's own key


@pytest.mark.parametrize("view", [dynamodb.StreamViewType.NEW_IMAGE, dynamodb.StreamViewType.KEYS_ONLY])
def test_a_table_without_old_images_is_refused(view):
    stack = _stack()
    with pytest.raises(ValueError, match="NEW_AND_OLD_IMAGES"):
        Scheduler(stack, "S", table=_table(stack, view))


def test_a_table_without_stream_or_with_other_keys_is_refused():
    stack = _stack()
    with pytest.raises(ValueError, match="stream"):
        Scheduler(stack, "S", table=_table(stack, None))
    other = _stack("Q")
    with pytest.raises(ValueError, match="keys pk"):
        Scheduler(other, "S", table=_table(other, sort_key="due"))
    imported = _stack("R")
    with pytest.raises(ValueError, match="table_stream_arn"):
        Scheduler(imported, "S", table=dynamodb.Table.from_table_name(imported, "T", "legacy-scheduler"))


def test_an_imported_table_is_taken_on_trust_with_a_warning():
    stack = _stack()
    stream = "arn:aws:dynamodb:eu-west-1:123456789012:table/legacy/stream/2026-01-01T00:00:00.000"
    table = dynamodb.Table.from_table_attributes(stack, "T", table_name="legacy", table_stream_arn=stream)
    Scheduler(stack, "S", table=table)
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::DynamoDB::Table", 0)
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {"EventSourceArn": stream})
    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("NEW_AND_OLD_IMAGES"))
    assert warnings


def test_event_format_reaches_the_functions_and_is_validated():
    s = Scheduler(_stack(), "S", event_format="cdk-scheduler")
    assert _env(s)[ENV["event_format"]] == "cdk-scheduler"
    with pytest.raises(ValueError, match="event_format"):
        Scheduler(_stack(), "S", event_format="cdk_scheduler")


def _sends_to(scheduler: Scheduler, role) -> bool:
    """Whether ``role``'s policies allow sqs:SendMessage on the scheduler's delivery queue."""
    template = Template.from_stack(Stack.of(scheduler)).to_json()
    stack = Stack.of(scheduler)
    role_ref = {"Ref": stack.get_logical_id(role.node.default_child)}
    queue = {"Fn::GetAtt": [stack.get_logical_id(scheduler.delivery_queue.node.default_child), "Arn"]}
    for pol in template["Resources"].values():
        if pol["Type"] != "AWS::IAM::Policy" or role_ref not in pol["Properties"]["Roles"]:
            continue
        for st in pol["Properties"]["PolicyDocument"]["Statement"]:
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            if "sqs:SendMessage" in actions and queue in resources:
                return True
    return False


def test_direct_delivery_reaches_the_functions_and_lets_the_poller_and_editor_send_events():
    """delivery="direct": the functions run in direct delivery and the poller and the editor may
    send to the delivery queue; there is no consumer (nor delay queue), and a control topic instead.
    By default only the consumer may send events, and there is no control topic."""
    direct = Scheduler(_stack(), "S", delivery="direct")
    assert _env(direct)[ENV["delivery"]] == "direct"
    assert _sends_to(direct, direct.poller_function.role) and _sends_to(direct, direct.editor_function.role)
    assert direct.consumer_function is None and direct.delay_queue is None and direct.control_topic is not None
    default = Scheduler(_stack(), "S")
    assert _env(default)[ENV["delivery"]] == "consumer"
    assert not _sends_to(default, default.poller_function.role) and not _sends_to(default, default.editor_function.role)
    assert default.consumer_function is not None and _sends_to(default, default.consumer_function.role)
    assert default.control_topic is None
    with pytest.raises(ValueError, match="delivery must be one of"):
        Scheduler(_stack(), "S", delivery="fast")


# ---- shards ---------------------------------------------------------------------------------------

def test_shards_reach_the_functions_and_grant_schedule_covers_every_partition():
    from aws_cdk import aws_iam as iam

    stack = _stack()
    s = Scheduler(stack, "S", partition_key_value="jobs", shards=4)
    assert s.partitions == ("jobs", "jobs#0", "jobs#1", "jobs#2", "jobs#3")
    producer = iam.Role(stack, "Producer", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    s.grant_schedule(producer)
    assert _env(s)[ENV["shards"]] == "4"
    (policy,) = [p for p in Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
                 if "Producer" in json.dumps(p["Properties"]["Roles"])]
    (statement, _fence_check) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": list(s.partitions)}}


def test_direct_delivery_defaults_to_a_longer_lead():
    """Its poll writes twice a row (claim, delete) where the default mode's writes once: a cluster
    needs the poll started earlier (config.DIRECT_LEAD_SECONDS); a lead given is kept."""
    assert _env(Scheduler(_stack(), "S", delivery="direct"))[ENV["lead_seconds"]] == "600"
    assert _env(Scheduler(_stack(), "S"))[ENV["lead_seconds"]] == "300"
    assert _env(Scheduler(_stack(), "S", delivery="direct", lead=Duration.minutes(4)))[ENV["lead_seconds"]] == "240"
