"""The Scheduler construct's resources, properties, wiring and IAM, asserted on the synthesized template."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from infra import construct as c
from punctual.bench.models import Models
from punctual.core.config import ENV, META_PK, RULE_DESCRIPTION, Settings
from punctual.core.cron import parse_one_shot_cron
from punctual.core.metrics_names import DELIVERED, INSTANCE_DIMENSION, LATENESS_MS, REJECTED_ROWS
from punctual.core.models import ATTR_ENQUEUED_MS
from punctual.core.stream_filter import EDITOR_STREAM_FILTERS


def getatt(lid: str, attr: str = "Arn") -> dict:
    return {"Fn::GetAtt": [lid, attr]}


def statements(synth, role) -> list[dict]:
    """Every statement of the policies attached to ``role``."""
    role_id = synth.logical_id(role)
    out = []
    for pol in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in pol["Properties"]["Roles"]:
            out.extend(pol["Properties"]["PolicyDocument"]["Statement"])
    return out


def grants(synth, role) -> set[tuple[str, str]]:
    """(action, resource as JSON) pairs: order-free, exact comparison of privileges."""
    pairs = set()
    for st in statements(synth, role):
        assert st["Effect"] == "Allow"
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        pairs |= {(a, json.dumps(r, sort_keys=True)) for a in actions for r in resources}
    return pairs


def pairs(actions, *resources) -> set[tuple[str, str]]:
    return {(a, json.dumps(r, sort_keys=True)) for a in actions for r in resources}


def env_of(synth, fn) -> dict:
    return synth.json["Resources"][synth.logical_id(fn)]["Properties"]["Environment"]["Variables"]


# ---- table ---------------------------------------------------------------------------------------

def test_table(demo):
    demo.template.resource_count_is("AWS::DynamoDB::Table", 1)
    demo.template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            "AttributeDefinitions": [
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            "BillingMode": "PAY_PER_REQUEST",
            "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True},
        },
    )


def test_table_expires_the_delivery_fences(demo):
    """The consumer writes a fence item per partition and due second (store.fence_second) with its
    expiry in ATTR_EXPIRES: DynamoDB's TTL on that attribute removes them a day later."""
    demo.template.has_resource_properties("AWS::DynamoDB::Table", {
        "TimeToLiveSpecification": {"AttributeName": "punctual_expires", "Enabled": True}})


def test_table_retained_by_default(demo, custom):
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from infra import Scheduler

    from .conftest import FAST_APP, NO_BUNDLING

    # the demo asks for DESTROY; the construct's default is RETAIN (pending tasks are data)
    demo.template.has_resource("AWS::DynamoDB::Table", {"DeletionPolicy": "Delete"})
    app = App(context=NO_BUNDLING, **FAST_APP)
    stack = Stack(app, "Defaults")
    Scheduler(stack, "S", alarms=False)
    tpl = Template.from_stack(stack)
    tpl.has_resource("AWS::DynamoDB::Table", {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"})
    tpl.all_resources("AWS::SQS::Queue", {"DeletionPolicy": "Retain"})


def test_table_customer_managed_key(custom):
    custom.template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {"SSESpecification": {"SSEEnabled": True, "SSEType": "KMS",
                              "KMSMasterKeyId": getatt(custom.logical_id(custom.extra["key"]))}},
    )


# ---- queues --------------------------------------------------------------------------------------

def test_delay_queue(demo):
    s = demo.scheduler
    q = demo.json["Resources"][demo.logical_id(s.delay_queue)]["Properties"]
    assert q["SqsManagedSseEnabled"] is True
    assert "FifoQueue" not in q  # standard: FIFO rejects per-message DelaySeconds
    assert q["VisibilityTimeout"] >= 6 * c.CONSUMER_TIMEOUT.to_seconds()
    assert q["RedrivePolicy"] == {
        "deadLetterTargetArn": getatt(demo.logical_id(s.delay_dead_letter_queue)),
        "maxReceiveCount": c.DELAY_MAX_RECEIVE_COUNT,
    }


def test_delivery_queue_and_dlq(demo):
    s = demo.scheduler
    assert s.scheduling_queue is s.delivery_queue
    q = demo.json["Resources"][demo.logical_id(s.delivery_queue)]["Properties"]
    assert q["SqsManagedSseEnabled"] is True
    assert q["RedrivePolicy"]["deadLetterTargetArn"] == getatt(demo.logical_id(s.dead_letter_queue))
    assert q["MessageRetentionPeriod"] == 14 * 86400


@pytest.mark.parametrize("attr", ["rejected_queue", "dead_letter_queue", "delay_dead_letter_queue",
                                  "rule_dead_letter_queue"])
def test_dead_letter_and_rejected_queues_keep_14_days(demo, attr):
    q = demo.json["Resources"][demo.logical_id(getattr(demo.scheduler, attr))]["Properties"]
    assert q["MessageRetentionPeriod"] == 14 * 86400
    assert q["SqsManagedSseEnabled"] is True


def test_every_queue_enforces_ssl(demo, custom):
    for synth, n in ((demo, 6), (custom, 6)):  # custom: 4 own + the existing queue and its DLQ
        queues = synth.resources("AWS::SQS::Queue")
        assert len(queues) == n
        policies = synth.resources("AWS::SQS::QueuePolicy").values()
        for lid in queues:
            deny = [
                st for p in policies if {"Ref": lid} in p["Properties"]["Queues"]
                for st in p["Properties"]["PolicyDocument"]["Statement"]
                if st["Effect"] == "Deny" and st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
            ]
            assert deny, f"{lid} does not enforce SSL"


def test_queues_use_the_customer_key(custom):
    key = getatt(custom.logical_id(custom.extra["key"]))
    for lid, q in custom.resources("AWS::SQS::Queue").items():
        assert q["Properties"]["KmsMasterKeyId"] == key, lid


def test_existing_delivery_queue_is_used(custom):
    s = custom.scheduler
    assert s.delivery_queue is custom.extra["existing"]
    assert s.dead_letter_queue is None
    assert env_of(custom, s.consumer_function)[ENV["delivery_queue_url"]] == {
        "Ref": custom.logical_id(custom.extra["existing"])
    }


# ---- rule ----------------------------------------------------------------------------------------

def test_rule_disabled_placeholder_targeting_poller(demo):
    s = demo.scheduler
    rules = demo.resources("AWS::Events::Rule")
    assert len(rules) == 1
    props = rules[demo.logical_id(s.rule)]["Properties"]
    assert props["State"] == "DISABLED"
    assert props["Description"] == RULE_DESCRIPTION
    assert props["ScheduleExpression"] == c.PLACEHOLDER_SCHEDULE
    assert parse_one_shot_cron(props["ScheduleExpression"]) == c.PLACEHOLDER_MINUTE_MS
    assert c.PLACEHOLDER_SCHEDULE.endswith(" 2199)")
    # the functions address the rule by name: the same literal name is in the template and the env
    assert isinstance(props["Name"], str) and len(props["Name"]) <= 64
    for fn in (s.poller_function, s.editor_function):
        assert env_of(demo, fn)[ENV["rule_name"]] == props["Name"]
    (target,) = props["Targets"]
    assert target["Arn"] == getatt(demo.logical_id(s.poller_function))
    assert target["RetryPolicy"] == {
        "MaximumRetryAttempts": c.RULE_TARGET_RETRY_ATTEMPTS,
        "MaximumEventAgeInSeconds": int(c.RULE_TARGET_MAX_EVENT_AGE.to_seconds()),
    }
    assert target["DeadLetterConfig"] == {"Arn": getatt(demo.logical_id(s.rule_dead_letter_queue))}
    demo.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {"Action": "lambda:InvokeFunction", "Principal": "events.amazonaws.com",
         "FunctionName": getatt(demo.logical_id(s.poller_function)), "SourceArn": getatt(demo.logical_id(s.rule))},
    )


# ---- functions -----------------------------------------------------------------------------------

def test_functions(demo):
    s = demo.scheduler
    expected = {
        s.poller_function: (c.POLLER_HANDLER, c.POLLER_TIMEOUT, c.POLLER_MEMORY_MB),
        s.consumer_function: (c.CONSUMER_HANDLER, c.CONSUMER_TIMEOUT, c.CONSUMER_MEMORY_MB),
        s.editor_function: (c.EDITOR_HANDLER, c.EDITOR_TIMEOUT, c.EDITOR_MEMORY_MB),
    }
    assert c.POLLER_HANDLER == "punctual.functions.poller.handler.handler"
    assert c.CONSUMER_HANDLER == "punctual.functions.consumer.handler.handler"
    assert c.EDITOR_HANDLER == "punctual.functions.editor.handler.handler"
    codes = set()
    for fn, (handler, timeout, memory) in expected.items():
        props = demo.json["Resources"][demo.logical_id(fn)]["Properties"]
        assert props["Handler"] == handler
        assert props["Runtime"] in ("python3.12", "python3.13")
        assert props["Architectures"] == ["arm64"]
        assert props["Timeout"] == timeout.to_seconds()
        assert props["MemorySize"] == memory
        codes.add(json.dumps(props["Code"], sort_keys=True))
    assert len(codes) == 1, "the three functions share one asset (bundled once)"
    # defaults deploy under the default account quota (10): no reservation; one poll at a time is
    # the poller's own lease, lasting as long as its timeout
    for fn in s.functions:
        props = demo.json["Resources"][demo.logical_id(fn)]["Properties"]
        assert "ReservedConcurrentExecutions" not in props
        assert props["Environment"]["Variables"]["PUNCTUAL_POLL_LEASE_SECONDS"] == str(int(c.POLLER_TIMEOUT.to_seconds()))


def test_only_the_function_a_poll_request_goes_round_to_may_be_invoked_in_a_loop(demo, direct):
    """Lambda stops a function looping through SQS or SNS after ~16 rounds by default: a poll request
    asked again during an outage is such a loop by design (the consumer through the delay queue; the
    poller through the control topic in direct delivery), so those two allow it, and nothing else does."""
    def allowed(synth):
        return {fn for fn in synth.scheduler.functions
                if synth.json["Resources"][synth.logical_id(fn)]["Properties"].get("RecursiveLoop") == "Allow"}

    assert allowed(demo) == {demo.scheduler.consumer_function}
    assert allowed(direct) == {direct.scheduler.poller_function}


def test_log_groups_retention_and_wiring(demo):
    s = demo.scheduler
    groups = demo.resources("AWS::Logs::LogGroup")
    for fn in s.functions:
        props = demo.json["Resources"][demo.logical_id(fn)]["Properties"]
        lid = props["LoggingConfig"]["LogGroup"]["Ref"]
        assert groups[lid]["Properties"]["RetentionInDays"] == 30


def test_custom_architecture_and_concurrency(custom):
    s = custom.scheduler
    for fn in s.functions:
        assert custom.json["Resources"][custom.logical_id(fn)]["Properties"]["Architectures"] == ["x86_64"]
    assert custom.json["Resources"][custom.logical_id(s.poller_function)]["Properties"][
        "ReservedConcurrentExecutions"] == 2  # still an option
    custom.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping", {"ScalingConfig": {"MaximumConcurrency": 20}}
    )


def test_environment_is_exactly_the_settings(demo, custom):
    """Names come from punctual.core.config.ENV only; values are what load_settings will parse."""
    for synth, expect in (
        (demo, Settings()),
        (custom, Settings(partition_key_value="jobs", window_seconds=600, lead_seconds=60, orphan_grace_seconds=240,
                          shards=4)),
    ):
        s = synth.scheduler
        for fn in s.functions:
            env = env_of(synth, fn)
            assert set(env) == set(ENV.values())
            assert env[ENV["table_name"]] == {"Ref": synth.logical_id(s.table)}
            assert env[ENV["delay_queue_url"]] == {"Ref": synth.logical_id(s.delay_queue)}
            assert env[ENV["rejected_queue_url"]] == {"Ref": synth.logical_id(s.rejected_queue)}
            assert env[ENV["delivery_queue_url"]] == {"Ref": synth.logical_id(s.delivery_queue)}
            for attr in ("partition_key_value", "shards", "window_seconds", "lead_seconds", "orphan_grace_seconds",
                         "max_attempts", "metrics_namespace"):
                assert env[ENV[attr]] == str(getattr(expect, attr)), attr
            assert env[ENV["log_payloads"]] == "false"


def test_functions_emit_under_the_instance_name(demo, custom):
    """PUNCTUAL_INSTANCE_NAME is the construct's instance_name: given (custom) or derived (demo)."""
    assert custom.scheduler.instance_name == "jobs-prod"
    assert demo.scheduler.instance_name not in ("", Settings().instance_name)
    for synth in (demo, custom):
        for fn in synth.scheduler.functions:
            assert env_of(synth, fn)[ENV["instance_name"]] == synth.scheduler.instance_name


def test_default_instance_names_are_unique_per_construct_and_stable():
    from aws_cdk import App, Stack

    from infra import Scheduler

    from .conftest import NO_BUNDLING

    def names():
        stack = Stack(App(context=NO_BUNDLING), "Two")
        return [Scheduler(stack, cid, alarms=False, resync_on_deploy=False).instance_name for cid in ("A", "B")]

    first = names()
    assert first[0] != first[1]
    assert names() == first  # same construct path, same name: a redeploy keeps its metrics


# ---- event sources -------------------------------------------------------------------------------

def test_consumer_event_source(demo):
    s = demo.scheduler
    demo.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "FunctionName": {"Ref": demo.logical_id(s.consumer_function)},
            "EventSourceArn": getatt(demo.logical_id(s.delay_queue)),
            "BatchSize": 10,
            "MaximumBatchingWindowInSeconds": 0,
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
        },
    )


def test_editor_event_source(demo):
    s = demo.scheduler
    mappings = [m["Properties"] for m in demo.resources("AWS::Lambda::EventSourceMapping").values()
                if m["Properties"]["FunctionName"] == {"Ref": demo.logical_id(s.editor_function)}]
    (m,) = mappings
    assert m["EventSourceArn"] == getatt(demo.logical_id(s.table), "StreamArn")
    assert m["StartingPosition"] in ("TRIM_HORIZON", "LATEST")
    assert m["BisectBatchOnFunctionError"] is True
    assert m["MaximumRetryAttempts"] == c.EDITOR_RETRY_ATTEMPTS
    # batches side by side per stream shard, in order per partition key (one per shard of Punctual's)
    assert m["ParallelizationFactor"] == c.EDITOR_PARALLELIZATION == 10
    # the benchmark models the mapping the construct creates
    bench = Models()
    assert (bench.stream_batch_size, bench.stream_max_retries, bench.stream_parallelization) == (
        c.EDITOR_BATCH_SIZE, c.EDITOR_RETRY_ATTEMPTS, c.EDITOR_PARALLELIZATION)
    assert m["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # records the stream gives up on: their OnFailure record reaches the delay queue, whose
    # consumer arms a poll for their rows (issue 28)
    assert m["DestinationConfig"] == {"OnFailure": {"Destination": getatt(demo.logical_id(s.delay_queue))}}
    editor = demo.json["Resources"][demo.logical_id(s.editor_function)]["Properties"]
    assert editor["Timeout"] == 20 and m["MaximumRetryAttempts"] == 2
    patterns = [json.loads(f["Pattern"]) for f in m["FilterCriteria"]["Filters"]]
    # the one definition the local stack and the benchmark evaluate (tests/local/test_filters.py)
    assert patterns == list(EDITOR_STREAM_FILTERS)
    assert sorted(p["eventName"][0] for p in patterns) == ["INSERT", "MODIFY"]
    for p in patterns:
        assert p["dynamodb"]["Keys"]["pk"]["S"] == [{"anything-but": [META_PK]}]
    (modify,) = [p for p in patterns if p["eventName"] == ["MODIFY"]]
    # Punctual's own claims (new image carries the send mark) never wake the editor
    assert modify["dynamodb"]["NewImage"] == {ATTR_ENQUEUED_MS: {"N": [{"exists": False}]}}


# ---- IAM: exactly the calls each function makes --------------------------------------------------

LOG_WRITES = ("logs:CreateLogStream", "logs:PutLogEvents")


def rule_arn_of(synth) -> dict:
    """The rule's ARN as the template grants it (built from its name: the functions need it first)."""
    name = synth.json["Resources"][synth.logical_id(synth.scheduler.rule)]["Properties"]["Name"]
    return {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":events:", {"Ref": "AWS::Region"}, ":",
                              {"Ref": "AWS::AccountId"}, f":rule/{name}"]]}


def log_group_of(synth, fn) -> dict:
    return getatt(synth.json["Resources"][synth.logical_id(fn)]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"])

def test_least_privilege(demo):
    s, d = demo.scheduler, demo
    table = getatt(d.logical_id(s.table))
    stream = getatt(d.logical_id(s.table), "StreamArn")
    delay, delivery, rejected = (getatt(d.logical_id(q)) for q in (s.delay_queue, s.delivery_queue, s.rejected_queue))
    rule_arn = rule_arn_of(d)
    logs = LOG_WRITES

    def log_group(fn):
        return log_group_of(d, fn)

    assert grants(d, s.poller_function.role) == (
        pairs(logs, log_group(s.poller_function))
        | pairs(["dynamodb:Query", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"], table)
        | pairs(["sqs:SendMessage"], delay, rejected)
        | pairs(["sqs:GetQueueAttributes"], delay)  # the backlog count before resending orphans
        | pairs(["events:PutRule", "events:DisableRule", "events:DescribeRule"], rule_arn)
        # the OnFailure destination (Lambda sends the failed invocation's record as the function's
        # role): CDK's SqsDestination grants grant_send_messages
        | pairs(["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], delay)
    )
    assert grants(d, s.consumer_function.role) == (
        pairs(logs, log_group(s.consumer_function))
        # fences (UpdateItem), the run's rows (Query), deletes in TransactWriteItems (DeleteItem), the meta row
        | pairs(["dynamodb:Query", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"], table)
        # the delivery; copies of pointers retried later and poll requests asked again (delay)
        | pairs(["sqs:SendMessage"], delivery, rejected, delay)
        # arming a poll asked for (a poll request, a failure notice)
        | pairs(["events:PutRule", "events:DisableRule", "events:DescribeRule"], rule_arn)
        # the SQS event source (ChangeMessageVisibility is also how the consumer puts a message back)
        | pairs(["sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl", "sqs:DeleteMessage",
                 "sqs:GetQueueAttributes"], delay)
    )
    assert grants(d, s.editor_function.role) == (
        pairs(logs, log_group(s.editor_function))
        | pairs(["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"], table)
        | pairs(["sqs:SendMessage"], delay, rejected)
        | pairs(["events:PutRule", "events:DisableRule", "events:DescribeRule"], rule_arn)
        # the DynamoDB event source
        | pairs(["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"], stream)
        | pairs(["dynamodb:ListStreams"], "*")
        # its on-failure destination
        | pairs(["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"], delay)
    )
    for fn in s.functions:
        role = d.json["Resources"][d.logical_id(fn.role)]["Properties"]
        assert "ManagedPolicyArns" not in role, "no AWSLambdaBasicExecutionRole (logs:* on *)"


def test_no_wildcards_except_list_streams(demo, custom):
    """Only dynamodb:ListStreams has Resource "*": the action has no resource-level permissions (AWS)."""
    for synth in (demo, custom):
        for lid, pol in synth.resources("AWS::IAM::Policy").items():
            for st in pol["Properties"]["PolicyDocument"]["Statement"]:
                actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
                for a in actions:
                    # kms:GenerateDataKey* / kms:ReEncrypt*: IKey.grant_encrypt_decrypt's variants, on one key ARN
                    assert "*" not in a or a in ("kms:GenerateDataKey*", "kms:ReEncrypt*"), (lid, a)
                if "*" in json.dumps(st["Resource"]):
                    assert actions == ["dynamodb:ListStreams"] and st["Resource"] == "*", (lid, st)


def test_kms_grants(custom):
    s, key = custom.scheduler, getatt(custom.logical_id(custom.extra["key"]))
    for fn in s.functions:
        assert ("kms:Decrypt", json.dumps(key, sort_keys=True)) in grants(custom, fn.role)
        assert ("kms:GenerateDataKey*", json.dumps(key, sort_keys=True)) in grants(custom, fn.role)
    # EventBridge must encrypt what it puts in the (KMS-encrypted) rule DLQ
    key_policy = custom.json["Resources"][custom.logical_id(custom.extra["key"])]["Properties"]["KeyPolicy"]
    assert any(st.get("Principal") == {"Service": "events.amazonaws.com"} for st in key_policy["Statement"])


# ---- grants for users ------------------------------------------------------------------------------

def test_grant_schedule(demo):
    s = demo.scheduler
    st = statements(demo, demo.stack.producer_role)
    (only, fences) = st
    assert set(only["Action"]) == set(c.SCHEDULE_ACTIONS)
    assert {"dynamodb:PutItem", "dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:Query"} <= set(
        only["Action"])
    assert only["Resource"] == getatt(demo.logical_id(s.table))
    # producers are confined to the task partition: the meta (arming) row is out of reach; in the meta
    # partition they may only check a delivery fence (cancel and reschedule's ConditionCheck)
    assert only["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["scheduler"]}}
    assert fences["Action"] in ("dynamodb:ConditionCheckItem", ["dynamodb:ConditionCheckItem"])
    assert fences["Resource"] == only["Resource"]
    assert fences["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["__punctual__"]}}


def test_grant_schedule_returns_the_kms_grant_too():
    """With a customer key on the table, the grant returned covers the key as well as the table."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_kms as kms

    from infra import Scheduler

    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "S")
    scheduler = Scheduler(stack, "S", encryption_key=kms.Key(stack, "K"), alarms=False, resync_on_deploy=False)
    grant = scheduler.grant_schedule(iam.Role(stack, "Producer", assumed_by=iam.AccountRootPrincipal()))
    actions = {a for st in grant.principal_statements for a in st.to_statement_json()["Action"]}
    assert {"dynamodb:PutItem", "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*"} <= actions
    assert grant.success


def test_grant_consume(custom):
    from aws_cdk import aws_iam as iam

    assert isinstance(custom.extra["grant"], iam.Grant)
    got = grants(custom, custom.extra["worker"])
    q = getatt(custom.logical_id(custom.extra["existing"]))
    assert pairs(["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"], q) <= got
    assert not any(a.startswith("sqs:Send") for a, _ in got)


def test_demo_consumer_subscribes_to_delivery_queue(demo):
    demo.template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"FunctionName": {"Ref": demo.logical_id(demo.stack.consumer)},
         "EventSourceArn": getatt(demo.logical_id(demo.scheduler.delivery_queue)),
         "FunctionResponseTypes": ["ReportBatchItemFailures"]},
    )


# ---- aliases, metrics, alarms -------------------------------------------------------------------------

def test_cdk_scheduler_aliases(demo):
    s = demo.scheduler
    assert s.scheduler_table is s.table
    assert s.scheduling_queue is s.delivery_queue
    assert s.partition_key_value == "scheduler"


def test_metrics(demo):
    s = demo.scheduler
    mine = {INSTANCE_DIMENSION: s.instance_name}
    lat = s.metric_lateness()
    assert (lat.namespace, lat.metric_name, lat.statistic, lat.dimensions) == ("Punctual", LATENESS_MS, "p99", mine)
    assert lat.period.to_seconds() == 300
    rej = s.metric_rejected_rows()
    assert (rej.namespace, rej.metric_name, rej.statistic, rej.dimensions) == ("Punctual", REJECTED_ROWS, "Sum", mine)
    assert s.metric_lateness(statistic="p50", label="median").label == "median"
    dead = s.metric_dead_letters()
    assert len(dead.using_metrics) == 3  # delay, delivery and rule DLQs
    assert {m.metric_name for m in dead.using_metrics.values()} == {"ApproximateNumberOfMessagesVisible"}
    # each queue FILLed with 0: the sum has data while any queue publishes (an inactive one does not)
    assert dead.expression == "FILL(d0, 0) + FILL(d1, 0) + FILL(d2, 0)"


def test_every_metric_method_takes_metric_options(demo):
    """The CDK guidelines' metric methods take MetricOptions: label, statistic, period, unit, color..."""
    from aws_cdk import Duration

    s = demo.scheduler
    minute = Duration.minutes(1)
    for method in (s.metric_lateness, s.metric_rejected_rows, s.metric_delay_queue_age,
                   lambda **o: s.metric_dead_letter_queue(s.delay_dead_letter_queue, **o)):
        m = method(label="mine", statistic="Average", period=minute, color="#ff0000")
        assert (m.label, m.statistic, m.period.to_seconds(), m.color) == ("mine", "Average", 60, "#ff0000"), method
    dead = s.metric_dead_letters(label="dlq", statistic="Sum", period=minute, color="#00ff00")
    assert (dead.label, dead.period.to_seconds(), dead.color) == ("dlq", 60, "#00ff00")
    assert {(m.statistic, m.period.to_seconds()) for m in dead.using_metrics.values()} == {("Sum", 60)}


def test_metric_carries_the_instance_dimension(demo, custom):
    from aws_cdk import Duration
    from aws_cdk import aws_cloudwatch as cloudwatch

    s = demo.scheduler
    m = s.metric(DELIVERED)
    assert (m.namespace, m.metric_name, m.statistic, m.period.to_seconds()) == ("Punctual", DELIVERED, "Sum", 300)
    assert m.dimensions == {INSTANCE_DIMENSION: s.instance_name}
    assert custom.scheduler.metric(DELIVERED).dimensions == {INSTANCE_DIMENSION: "jobs-prod"}
    opts = s.metric(DELIVERED, statistic="Average", period=Duration.minutes(1), unit=cloudwatch.Unit.COUNT,
                    label="delivered", dimensions_map={"Extra": "x", INSTANCE_DIMENSION: "someone else"})
    assert (opts.statistic, opts.period.to_seconds(), opts.unit, opts.label) == (
        "Average", 60, cloudwatch.Unit.COUNT, "delivered")
    assert opts.dimensions == {"Extra": "x", INSTANCE_DIMENSION: s.instance_name}


def test_poller_async_failures_reach_the_delay_queue_and_raise_an_alarm(demo):
    """A poll whose attempts run out (errors, or throttled past the event's 2-minute age) is not
    dropped: its OnFailure record reaches the delay queue, whose consumer arms the next poll and
    counts it (FunctionFailures, alarmed) (issue 28)."""
    s = demo.scheduler
    (config,) = [r["Properties"] for r in demo.resources("AWS::Lambda::EventInvokeConfig").values()
                 if r["Properties"]["FunctionName"] == {"Ref": demo.logical_id(s.poller_function)}]
    assert config["DestinationConfig"]["OnFailure"]["Destination"] == getatt(demo.logical_id(s.delay_queue))
    assert (config["MaximumRetryAttempts"], config["MaximumEventAgeInSeconds"]) == (2, 120)
    (alarm,) = [a["Properties"] for lid, a in demo.resources("AWS::CloudWatch::Alarm").items()
                if lid.startswith("SchedulerFunctionFailuresAlarm")]
    assert (alarm["MetricName"], alarm["Threshold"], alarm["TreatMissingData"]) == ("FunctionFailures", 1, "notBreaching")


def test_alarms(demo, custom):
    alarms = demo.resources("AWS::CloudWatch::Alarm")
    assert len(alarms) == len(demo.scheduler.alarms) == 10
    by_metric = {a["Properties"].get("MetricName"): a["Properties"] for a in alarms.values()}
    assert by_metric[LATENESS_MS]["ExtendedStatistic"] == "p99"
    assert by_metric[LATENESS_MS]["Namespace"] == "Punctual"
    instance = demo.scheduler.instance_name
    for name in (LATENESS_MS, REJECTED_ROWS):
        assert by_metric[name]["Dimensions"] == [{"Name": INSTANCE_DIMENSION, "Value": instance}], name
    assert all(instance in a["Properties"]["AlarmDescription"] for a in alarms.values())
    assert by_metric[REJECTED_ROWS]["Threshold"] == 1
    errors = [a for a in alarms.values() if a["Properties"].get("MetricName") == "Errors"]
    assert len(errors) == 3
    dlq = [a["Properties"] for a in alarms.values()
           if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"]
    assert sorted(json.dumps(a["Dimensions"], sort_keys=True) for a in dlq) == sorted(
        json.dumps([{"Name": "QueueName", "Value": getatt(demo.logical_id(q), "QueueName")}], sort_keys=True)
        for q in demo.scheduler.dead_letter_queues)  # one alarm per dead-letter queue, 3
    assert {(a["Statistic"], a["Threshold"], a["ComparisonOperator"]) for a in dlq} == {
        ("Maximum", 1, "GreaterThanOrEqualToThreshold")}
    age = by_metric["ApproximateAgeOfOldestMessage"]
    assert (age["Statistic"], age["Threshold"]) == ("Maximum", 1200)  # 20 min: > window 900 s + visibility 180 s
    assert age["Dimensions"] == [{"Name": "QueueName",
                                  "Value": {"Fn::GetAtt": [demo.logical_id(demo.scheduler.delay_queue), "QueueName"]}}]
    custom.template.resource_count_is("AWS::CloudWatch::Alarm", 0)
    demo.template.has_resource_properties("AWS::CloudWatch::Alarm", {"AlarmActions": Match.absent()})


# ---- props validation (no synth: the construct raises before building anything) --------------------

@pytest.mark.parametrize(
    "props, message",
    [
        ({"window_seconds": 30}, "window_seconds"),
        ({"window_seconds": 60, "lead_seconds": 1}, "lead_seconds"),
        ({"window_seconds": 901}, "window_seconds"),
        ({"window_seconds": 120, "lead_seconds": 120}, "lead_seconds"),
        ({"lead_seconds": -1}, "lead_seconds"),
        ({"partition_key_value": META_PK}, "reserved"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"shards": 0}, "shards must be 1..64"),
        ({"shards": 65}, "shards must be 1..64"),
        ({"orphan_grace_seconds": 180}, "visibility timeout"),
        ({"instance_name": ""}, "instance_name"),
        ({"instance_name": "  "}, "instance_name"),
        ({"instance_name": "x" * 256}, "instance_name"),
        ({"instance_name": "caf\u00e9"}, "instance_name"),
    ],
)
def test_props_validated_like_settings(props, message):
    from aws_cdk import App, Stack

    from infra import Scheduler

    from .conftest import NO_BUNDLING

    with pytest.raises(ValueError, match=message):
        Scheduler(Stack(App(context=NO_BUNDLING), "V"), "S", **props)


def test_metric_names_match_what_the_functions_emit():
    """The construct reads the metric names the handlers emit (EMF, the Instance dimension): each name is
    emitted by an ``obs.metric`` call, or as a (name, unit, value) entry of an ``obs.metrics`` call, as
    the shared constant or (until switched) the same literal."""
    import re
    from pathlib import Path

    import functions
    import punctual.core

    roots = (Path(functions.__file__).parent, Path(punctual.core.__file__).parent)
    code = "\n".join(p.read_text() for root in roots for p in root.rglob("*.py") if p.name != "metrics_names.py")
    for name, constant in ((LATENESS_MS, "LATENESS_MS"), (REJECTED_ROWS, "REJECTED_ROWS")):
        named = rf'(?:"{name}"|(?:\w+\.)?{constant}\b)'
        assert re.search(rf'obs\.metric\(\s*[\w.]+,\s*{named}', code) or (
            "obs.metrics(" in code and re.search(rf'\(\s*{named},\s*"\w+",', code)), name


def test_rule_dead_letter_queue_accepts_only_this_rule(demo):
    s = demo.scheduler
    dlq = demo.logical_id(s.rule_dead_letter_queue)
    allows = [
        st for p in demo.resources("AWS::SQS::QueuePolicy").values() if {"Ref": dlq} in p["Properties"]["Queues"]
        for st in p["Properties"]["PolicyDocument"]["Statement"] if st["Effect"] == "Allow"
    ]
    (st,) = allows
    assert st["Principal"] == {"Service": "events.amazonaws.com"}
    assert st["Action"] == "sqs:SendMessage"
    assert st["Condition"] == {"ArnEquals": {"aws:SourceArn": getatt(demo.logical_id(s.rule))}}


def test_readme_snippet_builds():
    """The README's snippet: construct, grant a producer, subscribe a consumer (no synth; docs/construct.md's
    whole app is run by tests/infra/test_docs.py)."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_lambda_event_sources as sources

    from infra import Scheduler

    from .conftest import NO_BUNDLING

    stack = Stack(App(context=NO_BUNDLING), "Readme")

    def fn(name):
        return lambda_.Function(stack, name, runtime=lambda_.Runtime.PYTHON_3_13, handler="index.handler",
                                code=lambda_.Code.from_inline("def handler(e, c): pass"))

    producer_fn, consumer_fn = fn("Producer"), fn("Consumer")
    scheduler = Scheduler(stack, "Scheduler")
    grant = scheduler.grant_schedule(producer_fn)
    consumer_fn.add_event_source(sources.SqsEventSource(scheduler.delivery_queue, report_batch_item_failures=True))
    assert grant.success


# ---- deployments that reset the rule: the poller runs once after -------------------------------

def _render(value) -> str:
    """A template value as text: Fn::Join concatenated, other intrinsics as <Name:args> (no quotes,
    so a rendered intrinsic can sit inside a JSON string)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(_render(p) for p in parts)
    if isinstance(value, dict) and len(value) == 1:
        ((fn, args),) = value.items()
        return f"<{fn}:{json.dumps(args, sort_keys=True).replace(chr(34), '')}>"
    return json.dumps(value, sort_keys=True)


def _leaves(value, skip=("Id",)) -> set[str]:
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref")):
        return {_render(value)}
    if isinstance(value, dict):
        return set().union(*(_leaves(v) for k, v in value.items() if k not in skip)) if value else set()
    if isinstance(value, list):
        return set().union(*(_leaves(v) for v in value)) if value else set()
    return {_render(value)}


@pytest.mark.parametrize("name", ["demo", "custom"])
def test_a_deployment_that_resets_the_rule_invokes_the_poller_after_it(name, request):
    """CloudFormation (re)puts the rule DISABLED with the placeholder on create and on any change
    of its properties: the armed poll in the meta row would be missed until the next insert.
    A custom resource invokes the poller (event invocation) after the rule; it is updated, hence
    run again, whenever any property of the rule changes, because its payload carries them all."""
    d = request.getfixturevalue(name)
    s = d.scheduler
    (lid,) = [k for k, r in d.json["Resources"].items() if r["Type"] == "Custom::AWS"]
    res = d.json["Resources"][lid]
    rule_id, poller_id = d.logical_id(s.rule), d.logical_id(s.poller_function)
    assert rule_id in res["DependsOn"] and poller_id in res["DependsOn"]
    create, update = (json.loads(_render(res["Properties"][k])) for k in ("Create", "Update"))
    assert create == update
    assert (create["service"], create["action"]) == ("Lambda", "invoke")
    params = create["parameters"]
    assert params["FunctionName"] == _render({"Ref": poller_id})
    assert params["InvocationType"] == "Event"  # the deployment does not wait for (or fail on) the poll
    payload = json.loads(params["Payload"])
    assert payload["source"] == "punctual.deploy"
    rule_props = d.json["Resources"][rule_id]["Properties"]
    missing = _leaves(rule_props) - _leaves(payload["rule"])
    assert not missing, f"rule properties not in the resync payload (a change would not re-run it): {missing}"
    # its own permission: invoking the poller, nothing else
    policy = [r for r in d.json["Resources"].values() if r["Type"] == "AWS::IAM::Policy"
              and "CustomResourcePolicy" in json.dumps(r["Properties"].get("PolicyName", ""))]
    (pol,) = policy
    assert [(st["Action"], st["Resource"]) for st in pol["Properties"]["PolicyDocument"]["Statement"]] == [
        ("lambda:InvokeFunction", getatt(poller_id))]


def test_resync_on_deploy_can_be_turned_off(tmp_path):
    from aws_cdk import App, Stack

    from infra import Scheduler

    from .conftest import FAST_APP, NO_BUNDLING

    app = App(outdir=str(tmp_path), context=NO_BUNDLING, **FAST_APP)
    stack = Stack(app, "NoResync")
    scheduler = Scheduler(stack, "S", alarms=False, resync_on_deploy=False)
    template = app.synth().get_stack_by_name("NoResync").template
    assert scheduler.resync is None
    assert not [r for r in template["Resources"].values() if r["Type"] == "Custom::AWS"]
    assert not [r for r in template["Resources"].values()
                if r["Type"] == "AWS::Lambda::Function" and not r["Properties"]["Runtime"].startswith("python")]


# ---- log groups, tracing ------------------------------------------------------------------------------

def test_every_function_logs_to_a_log_group_with_a_retention(demo):
    """Each function of the stack, CDK's deploy-time custom-resource provider included, writes to a
    log group of the template that has a retention: none falls back to a never-expiring
    /aws/lambda/<name> group that Lambda would create on its own."""
    groups = demo.resources("AWS::Logs::LogGroup")
    functions = demo.resources("AWS::Lambda::Function")
    assert len(functions) == 5  # poller, consumer, editor, the resync provider, the demo's consumer
    for lid, fn in functions.items():
        ref = fn["Properties"].get("LoggingConfig", {}).get("LogGroup", {}).get("Ref")
        assert ref in groups, lid
    assert all("RetentionInDays" in g["Properties"] for g in groups.values())
    provider = [fn for fn in functions.values() if fn["Properties"]["Runtime"].startswith("nodejs")]
    (group,) = [groups[fn["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]] for fn in provider]
    assert group["Properties"]["RetentionInDays"] == 30  # log_retention, default ONE_MONTH


def test_tracing_prop():
    from aws_cdk import App, Stack
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk.assertions import Template

    from infra import Scheduler

    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "S")
    s = Scheduler(stack, "S", alarms=False, resync_on_deploy=False, tracing=lambda_.Tracing.ACTIVE)
    t = Template.from_stack(stack).to_json()
    for fn in s.functions:
        props = t["Resources"][stack.get_logical_id(fn.node.default_child)]["Properties"]
        assert props["TracingConfig"] == {"Mode": "Active"}
        actions = {a for st in fn.role.node.find_child("DefaultPolicy").document.to_json()["Statement"]
                   for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}
        assert {"xray:PutTraceSegments", "xray:PutTelemetryRecords"} <= actions


# ---- direct delivery: no delay queue, no consumer, a control topic ----------------------------------

def _punctual_functions(synth) -> dict[str, dict]:
    """The construct's Lambda functions (not CDK's custom-resource provider), by handler."""
    return {f["Properties"]["Handler"]: f for f in synth.resources("AWS::Lambda::Function").values()
            if f["Properties"].get("Handler", "").startswith("punctual.functions.")}


def test_direct_delivery_deploys_no_delay_queue_and_no_consumer(direct):
    s = direct.scheduler
    assert (s.delay_queue, s.delay_dead_letter_queue, s.consumer_function) == (None, None, None)
    assert s.functions == [s.poller_function, s.editor_function]
    assert set(_punctual_functions(direct)) == {c.POLLER_HANDLER, c.EDITOR_HANDLER}  # 2 functions, no consumer
    # the queues: delivery + its DLQ, rejected rows, rule DLQ; no delay queue nor its DLQ
    queues = direct.resources("AWS::SQS::Queue")
    assert sorted(lid.rstrip("0123456789ABCDEF") for lid in queues) == [
        "SchedulerDeliveryDeadLetterQueue", "SchedulerDeliveryQueue", "SchedulerRejectedQueue",
        "SchedulerRuleDeadLetterQueue"]
    assert not [lid for lid in direct.json["Resources"] if "Delay" in lid or "Consumer" in lid]
    # no SQS event source: the one mapping is the editor's stream
    (mapping,) = direct.resources("AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["FunctionName"] == {"Ref": direct.logical_id(s.editor_function)}
    assert s.dead_letter_queues == [s.rule_dead_letter_queue, s.dead_letter_queue]
    with pytest.raises(ValueError, match="no delay queue"):
        s.metric_delay_queue_age()


def test_the_default_mode_deploys_no_control_topic(demo, custom):
    for synth in (demo, custom):
        assert synth.scheduler.control_topic is None
        synth.template.resource_count_is("AWS::SNS::Topic", 0)
        synth.template.resource_count_is("AWS::SNS::Subscription", 0)


def test_the_control_topic_is_encrypted_and_ssl_only(direct, direct_custom):
    s = direct.scheduler
    (topic_id,) = direct.resources("AWS::SNS::Topic")
    assert topic_id == direct.logical_id(s.control_topic)
    topic = direct.json["Resources"][topic_id]["Properties"]
    # no customer key: the AWS managed SNS key (its ARN by alias)
    assert topic["KmsMasterKeyId"] == {"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":kms:", {"Ref": "AWS::Region"}, ":", {"Ref": "AWS::AccountId"},
        ":" + c.AWS_MANAGED_SNS_KEY]]}
    (custom_topic,) = direct_custom.resources("AWS::SNS::Topic").values()
    assert custom_topic["Properties"]["KmsMasterKeyId"] == getatt(direct_custom.logical_id(direct_custom.extra["key"]))
    for synth in (direct, direct_custom):
        (policy,) = synth.resources("AWS::SNS::TopicPolicy").values()
        assert policy["Properties"]["Topics"] == [{"Ref": synth.logical_id(synth.scheduler.control_topic)}]
        (deny,) = policy["Properties"]["PolicyDocument"]["Statement"]
        assert (deny["Effect"], deny["Action"], deny["Condition"]) == (
            "Deny", "sns:Publish", {"Bool": {"aws:SecureTransport": "false"}})


def test_the_poller_is_subscribed_to_the_control_topic_with_a_dead_letter_queue(direct):
    s = direct.scheduler
    topic = {"Ref": direct.logical_id(s.control_topic)}
    (sub,) = direct.resources("AWS::SNS::Subscription").values()
    assert sub["Properties"] == {
        "Protocol": "lambda", "TopicArn": topic, "Endpoint": getatt(direct.logical_id(s.poller_function)),
        # a control message SNS cannot deliver is kept (the rule DLQ, alarmed), not lost
        "RedrivePolicy": {"deadLetterTargetArn": getatt(direct.logical_id(s.rule_dead_letter_queue))},
    }
    direct.template.has_resource_properties("AWS::Lambda::Permission", {
        "Action": "lambda:InvokeFunction", "Principal": "sns.amazonaws.com", "SourceArn": topic,
        "FunctionName": getatt(direct.logical_id(s.poller_function))})
    dlq = direct.logical_id(s.rule_dead_letter_queue)
    allows = [st for p in direct.resources("AWS::SQS::QueuePolicy").values() if {"Ref": dlq} in p["Properties"]["Queues"]
              for st in p["Properties"]["PolicyDocument"]["Statement"] if st["Effect"] == "Allow"]
    assert sorted((st["Principal"]["Service"], json.dumps(st["Condition"], sort_keys=True)) for st in allows) == [
        ("events.amazonaws.com", json.dumps({"ArnEquals": {"aws:SourceArn": getatt(direct.logical_id(s.rule))}})),
        ("sns.amazonaws.com", json.dumps({"ArnEquals": {"aws:SourceArn": topic}})),
    ]


def test_direct_failure_notices_go_to_the_control_topic(direct):
    """The poller's async invocations whose attempts run out and the stream batches the editor's mapping
    gives up on reach the control topic, whose subscriber (the poller) arms a poll for their rows and
    counts them (FunctionFailures, alarmed)."""
    s = direct.scheduler
    topic = {"Ref": direct.logical_id(s.control_topic)}
    (config,) = direct.resources("AWS::Lambda::EventInvokeConfig").values()
    assert config["Properties"]["FunctionName"] == {"Ref": direct.logical_id(s.poller_function)}
    assert config["Properties"]["DestinationConfig"] == {"OnFailure": {"Destination": topic}}
    assert (config["Properties"]["MaximumRetryAttempts"], config["Properties"]["MaximumEventAgeInSeconds"]) == (2, 120)
    (mapping,) = direct.resources("AWS::Lambda::EventSourceMapping").values()
    assert mapping["Properties"]["DestinationConfig"] == {"OnFailure": {"Destination": topic}}
    assert mapping["Properties"]["MaximumRetryAttempts"] == c.EDITOR_RETRY_ATTEMPTS


def test_direct_environment_names_the_control_topic_and_no_delay_queue(direct, direct_custom):
    from punctual.core.config import check_required

    for synth in (direct, direct_custom):
        s = synth.scheduler
        for fn, name in ((s.poller_function, "poller"), (s.editor_function, "editor")):
            env = env_of(synth, fn)
            assert env[ENV["control_topic_arn"]] == {"Ref": synth.logical_id(s.control_topic)}
            assert ENV["delay_queue_url"] not in env
            assert set(env) == set(ENV.values()) - {ENV["delay_queue_url"]}
            assert env[ENV["delivery"]] == "direct"
            assert env[ENV["delivery_queue_url"]] == {"Ref": synth.logical_id(s.delivery_queue)}
            # what the function checks on its cold start (tokens resolved by CloudFormation)
            check_required({k: v if isinstance(v, str) else "resolved" for k, v in env.items()}, name)


def test_direct_least_privilege(direct):
    """No delay-queue grant, no backlog read; sns:Publish on the control topic (poll requests, and the
    OnFailure destinations, which publish as the function's role); sends to the delivery queue."""
    s, d = direct.scheduler, direct
    table = getatt(d.logical_id(s.table))
    stream = getatt(d.logical_id(s.table), "StreamArn")
    delivery, rejected = (getatt(d.logical_id(q)) for q in (s.delivery_queue, s.rejected_queue))
    topic = {"Ref": d.logical_id(s.control_topic)}
    rule_arn = rule_arn_of(d)
    logs = LOG_WRITES

    def log_group(fn):
        return log_group_of(d, fn)

    assert grants(d, s.poller_function.role) == (
        pairs(logs, log_group(s.poller_function))
        | pairs(["dynamodb:Query", "dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"], table)
        | pairs(["sqs:SendMessage"], delivery, rejected)
        | pairs(["events:PutRule", "events:DisableRule", "events:DescribeRule"], rule_arn)
        | pairs(["sns:Publish"], topic)
    )
    assert grants(d, s.editor_function.role) == (
        pairs(logs, log_group(s.editor_function))
        | pairs(["dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"], table)
        | pairs(["sqs:SendMessage"], delivery, rejected)
        | pairs(["events:PutRule", "events:DisableRule", "events:DescribeRule"], rule_arn)
        | pairs(["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"], stream)
        | pairs(["dynamodb:ListStreams"], "*")
        | pairs(["sns:Publish"], topic)
    )


def test_direct_kms_grants(direct_custom):
    """With a customer key the topic uses it: the poller and the editor may encrypt with it (publish),
    SNS may write what it cannot deliver to the (encrypted) rule DLQ; the brought delivery queue's own
    key is granted to the two functions that send events."""
    d, s = direct_custom, direct_custom.scheduler
    key, other = (json.dumps(getatt(d.logical_id(d.extra[k])), sort_keys=True) for k in ("key", "other_key"))
    for fn in s.functions:
        for k in (key, other):
            assert {("kms:Decrypt", k), ("kms:GenerateDataKey*", k)} <= grants(d, fn.role)
    statements_ = d.json["Resources"][d.logical_id(d.extra["key"])]["Properties"]["KeyPolicy"]["Statement"]
    (sns_st,) = [st for st in statements_ if st.get("Principal") == {"Service": "sns.amazonaws.com"}]
    assert sorted(sns_st["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey*"]


def test_direct_alarms(direct):
    """Nothing watches a delay queue or a consumer; FunctionFailures stays (the poller emits it when it
    serves a failure notice from the control topic)."""
    s = direct.scheduler
    ids = sorted(a.node.id for a in s.alarms)
    assert ids == ["DeliveryDeadLetterQueueAlarm", "EditorErrorsAlarm", "FunctionFailuresAlarm", "LatenessAlarm",
                   "PollerErrorsAlarm", "RejectedRowsAlarm", "RuleDeadLetterQueueAlarm"]
    direct.template.resource_count_is("AWS::CloudWatch::Alarm", 7)
    alarms = {a.node.id: direct.json["Resources"][direct.logical_id(a)]["Properties"] for a in s.alarms}
    failures = alarms["FunctionFailuresAlarm"]
    assert (failures["MetricName"], failures["Namespace"], failures["Threshold"], failures["Dimensions"]) == (
        "FunctionFailures", "Punctual", 1, [{"Name": INSTANCE_DIMENSION, "Value": s.instance_name}])
    assert "control topic" in alarms["RuleDeadLetterQueueAlarm"]["AlarmDescription"]


def test_direct_dashboard_has_no_delay_queue(direct_custom):
    (dash,) = direct_custom.resources("AWS::CloudWatch::Dashboard").values()
    text = str(direct_custom.stack.resolve(dash["Properties"]["DashboardBody"]))
    assert "Delay queue" not in text and "ApproximateAgeOfOldestMessage" not in text
    assert "Consumer" not in text
    for fn in direct_custom.scheduler.functions:
        assert direct_custom.logical_id(fn) in text
