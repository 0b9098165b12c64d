"""Walk a synthesized CloudFormation template and create its resources at a local endpoint.

One source of truth: everything the local stack holds comes from the template.

- ``AWS::DynamoDB::Table`` / ``GlobalTable``: key schema, attribute definitions, stream view type.
- ``AWS::SQS::Queue``: visibility timeout, retention, delay, size, redrive policy (DLQ created first).
- ``AWS::Events::Rule``: name, schedule expression, state, description, targets.
- ``AWS::Lambda::Function``: handler string, environment variables (``Ref``/``Fn::GetAtt``
  resolved to the local names, URLs and ARNs), timeout, reserved concurrency. Functions are
  not created in moto: the drivers import and call them in-process.
- ``AWS::Lambda::EventSourceMapping``: which function reads which queue or stream, batch size,
  batching window, ``ReportBatchItemFailures``, starting position, retries, bisect, concurrency,
  the OnFailure destination (a queue or a topic ARN).
- ``AWS::Lambda::EventInvokeConfig``: a function's asynchronous retries, maximum event age and
  OnFailure destination (a queue or a topic ARN).
- ``AWS::SNS::Topic``: created in moto by name (``Ref``: its ARN); KMS settings have no local
  meaning. ``AWS::SNS::Subscription``: an ``sqs`` one is made in moto (moto delivers to SQS);
  a ``lambda`` one is recorded (:class:`Subscription`: topic -> function, its redrive DLQ) for
  the local stack's SNS driver to run, not made in moto, whose own Lambda backend has no such
  function. ``AWS::SNS::TopicPolicy`` has no local behaviour.

Everything else (IAM, KMS, alarms, log groups, policies...) has no local behaviour and is
counted in ``LocalModel.ignored``. Resources are created on demand while resolving
references, so a queue's DLQ exists before its redrive policy names it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

ACCOUNT = "123456789012"
REGION = "us-east-1"
NO_VALUE = object()

TABLE_TYPES = ("AWS::DynamoDB::Table", "AWS::DynamoDB::GlobalTable")
QUEUE_TYPE = "AWS::SQS::Queue"
RULE_TYPE = "AWS::Events::Rule"
FUNCTION_TYPE = "AWS::Lambda::Function"
MAPPING_TYPE = "AWS::Lambda::EventSourceMapping"
INVOKE_CONFIG_TYPE = "AWS::Lambda::EventInvokeConfig"
TOPIC_TYPE = "AWS::SNS::Topic"
SUBSCRIPTION_TYPE = "AWS::SNS::Subscription"

_QUEUE_ATTRS = (
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "FifoQueue",
    "ContentBasedDeduplication",
)


class TemplateUnsupported(ValueError):
    pass


@dataclass
class Table:
    logical_id: str
    name: str
    arn: str
    stream_arn: str | None = None
    stream_view_type: str | None = None


@dataclass
class Queue:
    logical_id: str
    name: str
    url: str
    arn: str
    attributes: dict[str, str] = field(default_factory=dict)
    dlq_arn: str | None = None
    max_receive_count: int | None = None


@dataclass
class Rule:
    logical_id: str
    name: str
    arn: str
    schedule_expression: str | None
    state: str
    target_arns: list[str] = field(default_factory=list)
    dlq_arn: str | None = None  # a target's DeadLetterConfig: where EventBridge puts what it could not deliver


@dataclass
class Function:
    logical_id: str
    name: str
    arn: str
    handler: str
    environment: dict[str, str]
    timeout_s: int = 3
    reserved_concurrency: int | None = None
    # asynchronous invocations (the rule's): retries of a failed invocation (EventInvokeConfig)
    async_retries: int = 2
    async_max_event_age_s: int | None = None  # MaximumEventAgeInSeconds (None: Lambda's 6 hours)
    async_on_failure_arn: str | None = None


@dataclass
class Mapping:
    logical_id: str
    function: str  # logical id of the function
    kind: str  # "sqs" | "dynamodb"
    source: str  # logical id of the queue or table
    source_arn: str
    batch_size: int
    batching_window_s: int = 0
    report_batch_item_failures: bool = False
    starting_position: str = "TRIM_HORIZON"
    maximum_retry_attempts: int = -1
    bisect_on_error: bool = False
    max_record_age_s: int | None = None  # MaximumRecordAgeInSeconds (streams; None or -1: no limit)
    maximum_concurrency: int | None = None
    enabled: bool = True
    filters: list[dict[str, Any]] = field(default_factory=list)  # FilterCriteria patterns (parsed)
    on_failure_arn: str | None = None  # DestinationConfig.OnFailure (a queue), streams only


@dataclass
class Topic:
    logical_id: str
    name: str
    arn: str


@dataclass
class Subscription:
    """A topic's ``lambda`` subscription: SNS invokes the function asynchronously per message."""

    logical_id: str
    topic_arn: str
    function: str  # logical id of the function
    dlq_arn: str | None = None  # RedrivePolicy: where SNS puts a message it could not hand to Lambda


@dataclass
class LocalModel:
    tables: dict[str, Table] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    rules: dict[str, Rule] = field(default_factory=dict)
    functions: dict[str, Function] = field(default_factory=dict)
    mappings: dict[str, Mapping] = field(default_factory=dict)
    topics: dict[str, Topic] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)  # lambda ones
    ignored: Counter = field(default_factory=Counter)

    def function_for_arn(self, arn: str) -> Function | None:
        return next((f for f in self.functions.values() if arn in (f.arn, f.name)), None)


def _kebab(text: str) -> str:
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", text)
    text = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", text)
    return re.sub(r"[^a-zA-Z0-9-]+", "-", text).strip("-").lower()


def local_name(logical_id: str, prefix: str, strip: str = "") -> str:
    """``SchedulerDelayQueue1A2B3C4D`` -> ``punctual-delay-queue`` (CDK hash and construct id dropped)."""
    base = re.sub(r"[0-9A-F]{8}$", "", logical_id) or logical_id
    if strip and base.startswith(strip) and len(base) > len(strip):
        base = base[len(strip):]
    return f"{prefix}-{_kebab(base)}"[:80]


class Provisioner:
    """Creates the template's resources through boto3 clients aimed at the local endpoint."""

    def __init__(
        self,
        template: dict[str, Any],
        clients: dict[str, Any],
        *,
        region: str = REGION,
        account: str = ACCOUNT,
        stack_name: str = "PunctualLocal",
        prefix: str = "punctual",
        strip: str = "Scheduler",
    ):
        self.template = template
        self.resources: dict[str, dict[str, Any]] = template.get("Resources", {})
        self.params: dict[str, Any] = template.get("Parameters", {})
        self.conditions: dict[str, Any] = template.get("Conditions", {})
        self.ddb, self.sqs, self.events = clients["dynamodb"], clients["sqs"], clients["events"]
        self.sns = clients.get("sns")  # needed only by a template with a topic
        self.region, self.account, self.stack_name = region, account, stack_name
        self.prefix, self.strip = prefix, strip
        self.model = LocalModel()
        self._names: dict[str, str] = {}
        self._creating: set[str] = set()
        self._done: set[str] = set()

    # -- entry point ------------------------------------------------------
    def provision(self) -> LocalModel:
        for lid in self.resources:
            self.ensure(lid)
        return self.model

    # -- identity (no I/O) --------------------------------------------------
    def _type(self, lid: str) -> str:
        if lid not in self.resources:
            raise TemplateUnsupported(f"reference to unknown resource {lid!r}")
        return self.resources[lid].get("Type", "")

    def _props(self, lid: str) -> dict[str, Any]:
        return self.resources[lid].get("Properties", {}) or {}

    def name(self, lid: str) -> str:
        if lid in self._names:
            return self._names[lid]
        kind, props = self._type(lid), self._props(lid)
        explicit = {
            "AWS::DynamoDB::Table": "TableName",
            "AWS::DynamoDB::GlobalTable": "TableName",
            QUEUE_TYPE: "QueueName",
            RULE_TYPE: "Name",
            FUNCTION_TYPE: "FunctionName",
            TOPIC_TYPE: "TopicName",
        }.get(kind)
        name = None
        if explicit and explicit in props:
            name = str(self.resolve(props[explicit]))
        if not name:
            name = local_name(lid, self.prefix, self.strip)
            if kind in (QUEUE_TYPE, TOPIC_TYPE) and str(props.get(
                    "FifoQueue" if kind == QUEUE_TYPE else "FifoTopic", "")).lower() == "true":
                name += ".fifo"
        self._names[lid] = name
        return name

    def arn(self, lid: str) -> str:
        kind, name, r, a = self._type(lid), self.name(lid), self.region, self.account
        if kind in TABLE_TYPES:
            return f"arn:aws:dynamodb:{r}:{a}:table/{name}"
        if kind == QUEUE_TYPE:
            return f"arn:aws:sqs:{r}:{a}:{name}"
        if kind == RULE_TYPE:
            return f"arn:aws:events:{r}:{a}:rule/{name}"
        if kind == FUNCTION_TYPE:
            return f"arn:aws:lambda:{r}:{a}:function:{name}"
        if kind == TOPIC_TYPE:
            return f"arn:aws:sns:{r}:{a}:{name}"
        service = kind.split("::")[1].lower() if kind.count("::") == 2 else "unknown"
        return f"arn:aws:{service}:{r}:{a}:local/{lid}"

    # -- intrinsic functions ----------------------------------------------------
    def ref(self, target: str) -> Any:
        pseudo = {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack_name,
            "AWS::StackId": f"arn:aws:cloudformation:{self.region}:{self.account}:stack/{self.stack_name}/local",
            "AWS::NoValue": NO_VALUE,
        }
        if target in pseudo:
            return pseudo[target]
        if target in self.params:
            return self.params[target].get("Default", "")
        kind = self._type(target)
        if kind == QUEUE_TYPE:
            self.ensure(target)
            return self.model.queues[target].url
        if kind == TOPIC_TYPE:
            self.ensure(target)
            return self.model.topics[target].arn
        if kind in TABLE_TYPES or kind in (RULE_TYPE, FUNCTION_TYPE):
            return self.name(target)
        return target

    def getatt(self, target: str, attr: str) -> Any:
        kind = self._type(target)
        if kind in TABLE_TYPES and attr == "StreamArn":
            self.ensure(target)
            arn = self.model.tables[target].stream_arn
            if arn is None:
                raise TemplateUnsupported(f"{target}.StreamArn: the table has no stream")
            return arn
        if kind == QUEUE_TYPE:
            self.ensure(target)
            q = self.model.queues[target]
            return {"Arn": q.arn, "QueueName": q.name, "QueueUrl": q.url}[attr]
        if kind == TOPIC_TYPE:
            self.ensure(target)
            t = self.model.topics[target]
            return {"TopicArn": t.arn, "TopicName": t.name}[attr]
        if attr == "Arn":
            return self.arn(target)
        if attr in ("Name", "TableName", "FunctionName"):
            return self.name(target)
        return f"{target}.{attr}"

    def condition(self, name: str) -> bool:
        expr = self.conditions.get(name)
        if expr is None:
            raise TemplateUnsupported(f"unknown condition {name!r}")
        return bool(self._cond(expr))

    def _cond(self, expr: Any) -> Any:
        if isinstance(expr, dict) and len(expr) == 1:
            (k, a), = expr.items()
            if k == "Fn::Equals":
                return self.resolve(a[0]) == self.resolve(a[1])
            if k == "Fn::Not":
                return not self._cond(a[0])
            if k == "Fn::And":
                return all(self._cond(x) for x in a)
            if k == "Fn::Or":
                return any(self._cond(x) for x in a)
            if k == "Condition":
                return self.condition(a)
        return self.resolve(expr)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) == 1:
                (k, a), = value.items()
                if k == "Ref":
                    return self.ref(a)
                if k == "Fn::GetAtt":
                    lid, attr = a if isinstance(a, list) else a.split(".", 1)
                    return self.getatt(lid, attr)
                if k == "Fn::Join":
                    sep, parts = a
                    return sep.join(str(p) for p in self.resolve(parts))
                if k == "Fn::Select":
                    return self.resolve(a[1])[int(self.resolve(a[0]))]
                if k == "Fn::Split":
                    return str(self.resolve(a[1])).split(a[0])
                if k == "Fn::Sub":
                    return self._sub(a)
                if k == "Fn::If":
                    return self.resolve(a[1] if self.condition(a[0]) else a[2])
                if k == "Fn::Base64":
                    return self.resolve(a)
                if k.startswith("Fn::"):
                    raise TemplateUnsupported(f"intrinsic {k} is not supported locally")
            out = {}
            for k, v in value.items():
                r = self.resolve(v)
                if r is not NO_VALUE:
                    out[k] = r
            return out
        if isinstance(value, list):
            return [r for r in (self.resolve(v) for v in value) if r is not NO_VALUE]
        return value

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

        def one(m: re.Match) -> str:
            expr = m.group(1)
            if expr.startswith("!"):
                return "${" + expr[1:] + "}"
            if expr in variables:
                return str(self.resolve(variables[expr]))
            if "." in expr:
                lid, attr = expr.split(".", 1)
                return str(self.getatt(lid, attr))
            return str(self.ref(expr))

        return re.sub(r"\$\{([^}]+)\}", one, text)

    # -- creation -------------------------------------------------------------
    def ensure(self, lid: str) -> None:
        if lid in self._done or lid in self._creating:
            return
        self._creating.add(lid)
        try:
            kind = self._type(lid)
            if kind in TABLE_TYPES:
                self._table(lid)
            elif kind == QUEUE_TYPE:
                self._queue(lid)
            elif kind == RULE_TYPE:
                self._rule(lid)
            elif kind == FUNCTION_TYPE:
                self._function(lid)
            elif kind == MAPPING_TYPE:
                self._mapping(lid)
            elif kind == INVOKE_CONFIG_TYPE:
                self._invoke_config(lid)
            elif kind == TOPIC_TYPE:
                self._topic(lid)
            elif kind == SUBSCRIPTION_TYPE:
                self._subscription(lid)
            else:
                self.model.ignored[kind] += 1
            self._done.add(lid)
        finally:
            self._creating.discard(lid)

    def _table(self, lid: str) -> None:
        p = self.resolve(self._props(lid))
        name = self.name(lid)
        kw: dict[str, Any] = {
            "TableName": name,
            "KeySchema": p["KeySchema"],
            "AttributeDefinitions": p["AttributeDefinitions"],
        }
        billing = p.get("BillingMode", "PROVISIONED" if "ProvisionedThroughput" in p else "PAY_PER_REQUEST")
        kw["BillingMode"] = billing
        if billing == "PROVISIONED":
            kw["ProvisionedThroughput"] = p.get(
                "ProvisionedThroughput", {"ReadCapacityUnits": 5, "WriteCapacityUnits": 5}
            )
        view = (p.get("StreamSpecification") or {}).get("StreamViewType")
        if view:
            kw["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": view}
        for gsi_key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
            if p.get(gsi_key):
                kw[gsi_key] = [
                    {k: v for k, v in ix.items() if k in ("IndexName", "KeySchema", "Projection")}
                    | ({"ProvisionedThroughput": ix["ProvisionedThroughput"]} if billing == "PROVISIONED" else {})
                    for ix in p[gsi_key]
                ]
        desc = self.ddb.create_table(**kw)["TableDescription"]
        self.model.tables[lid] = Table(
            lid, name, desc.get("TableArn", self.arn(lid)), desc.get("LatestStreamArn"), view
        )

    def _queue(self, lid: str) -> None:
        p = self.resolve(self._props(lid))
        name = self.name(lid)
        attrs = {k: str(p[k]).lower() if isinstance(p[k], bool) else str(p[k]) for k in _QUEUE_ATTRS if k in p}
        dlq_arn, max_receives = None, None
        if p.get("RedrivePolicy"):
            policy = p["RedrivePolicy"]
            if isinstance(policy, str):
                policy = json.loads(policy)
            dlq_arn, max_receives = policy["deadLetterTargetArn"], int(policy["maxReceiveCount"])
            attrs["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receives)})
        url = self.sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.model.queues[lid] = Queue(lid, name, url, arn, attrs, dlq_arn, max_receives)

    def _rule(self, lid: str) -> None:
        p = self.resolve(self._props(lid))
        name = self.name(lid)
        kw: dict[str, Any] = {"Name": name, "State": p.get("State", "ENABLED")}
        for k in ("ScheduleExpression", "Description"):
            if k in p:
                kw[k] = p[k]
        if "EventPattern" in p:
            kw["EventPattern"] = json.dumps(p["EventPattern"])
        self.events.put_rule(**kw)
        targets = []
        for t in p.get("Targets", []):
            target = {"Id": t["Id"], "Arn": t["Arn"]}
            if "Input" in t:
                target["Input"] = t["Input"]
            targets.append(target)
        if targets:
            self.events.put_targets(Rule=name, Targets=targets)
        dlq_arn = next((t["DeadLetterConfig"]["Arn"] for t in p.get("Targets", []) if t.get("DeadLetterConfig")), None)
        self.model.rules[lid] = Rule(
            lid, name, self.arn(lid), p.get("ScheduleExpression"), kw["State"], [t["Arn"] for t in targets], dlq_arn
        )

    def _function(self, lid: str) -> None:
        runtime = str(self._props(lid).get("Runtime", "python"))
        if not runtime.startswith("python"):
            # e.g. CDK's AwsCustomResource provider (Node.js), run by CloudFormation at deploy time:
            # the local stack runs Python handlers in process and has no deployments
            self.model.ignored[f"{FUNCTION_TYPE} ({runtime})"] += 1
            return
        p = self.resolve(self._props(lid))
        env = {k: str(v) for k, v in ((p.get("Environment") or {}).get("Variables") or {}).items()}
        reserved = p.get("ReservedConcurrentExecutions")
        self.model.functions[lid] = Function(
            lid,
            self.name(lid),
            self.arn(lid),
            p.get("Handler", ""),
            env,
            int(p.get("Timeout", 3)),
            int(reserved) if reserved is not None else None,
        )

    def _mapping(self, lid: str) -> None:
        p = self.resolve(self._props(lid))
        fn_ref = str(p["FunctionName"])
        fn_lid = self._function_lid(fn_ref)
        if fn_lid is None:
            raise TemplateUnsupported(f"{lid}: function {fn_ref!r} is not in the template")
        source_arn = p.get("EventSourceArn", "")
        queue = next((q for q in self.model.queues.values() if q.arn == source_arn), None)
        table = next((t for t in self.model.tables.values() if t.stream_arn == source_arn), None)
        if queue is not None:
            kind, source, default_batch = "sqs", queue.logical_id, 10
        elif table is not None:
            kind, source, default_batch = "dynamodb", table.logical_id, 100
        else:
            self.model.ignored[f"{MAPPING_TYPE} ({source_arn or 'no source'})"] += 1
            return
        concurrency = (p.get("ScalingConfig") or {}).get("MaximumConcurrency")
        self.model.mappings[lid] = Mapping(
            logical_id=lid,
            function=fn_lid,
            kind=kind,
            source=source,
            source_arn=source_arn,
            batch_size=int(p.get("BatchSize", default_batch)),
            batching_window_s=int(p.get("MaximumBatchingWindowInSeconds", 0)),
            report_batch_item_failures="ReportBatchItemFailures" in (p.get("FunctionResponseTypes") or []),
            starting_position=p.get("StartingPosition", "TRIM_HORIZON"),
            maximum_retry_attempts=int(p.get("MaximumRetryAttempts", -1)),
            bisect_on_error=bool(p.get("BisectBatchOnFunctionError", False)),
            max_record_age_s=_record_age(p.get("MaximumRecordAgeInSeconds")),
            maximum_concurrency=int(concurrency) if concurrency is not None else None,
            enabled=str(p.get("Enabled", True)).lower() != "false",
            filters=[json.loads(f["Pattern"]) for f in (p.get("FilterCriteria") or {}).get("Filters", [])],
            on_failure_arn=((p.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination"),
        )
        self.ensure(fn_lid)

    def _function_lid(self, ref: str) -> str | None:
        return next(
            (k for k in self.resources if self._type(k) == FUNCTION_TYPE and ref in (self.name(k), self.arn(k))),
            None,
        )

    def _invoke_config(self, lid: str) -> None:
        p = self.resolve(self._props(lid))
        fn_lid = self._function_lid(str(p.get("FunctionName", "")))
        if fn_lid is None:
            self.model.ignored[INVOKE_CONFIG_TYPE] += 1
            return
        self.ensure(fn_lid)
        fn = self.model.functions[fn_lid]
        fn.async_retries = int(p.get("MaximumRetryAttempts", 2))
        age = p.get("MaximumEventAgeInSeconds")
        fn.async_max_event_age_s = int(age) if age is not None else None
        fn.async_on_failure_arn = ((p.get("DestinationConfig") or {}).get("OnFailure") or {}).get("Destination")


    def _topic(self, lid: str) -> None:
        if self.sns is None:
            raise TemplateUnsupported(f"{lid}: an SNS topic needs an 'sns' client")
        p = self.resolve(self._props(lid))
        name = self.name(lid)
        # KmsMasterKeyId: no encryption locally; FIFO topics keep their attribute
        attrs = {k: str(p[k]).lower() if isinstance(p[k], bool) else str(p[k])
                 for k in ("FifoTopic", "ContentBasedDeduplication", "DisplayName") if k in p}
        arn = self.sns.create_topic(Name=name, Attributes=attrs)["TopicArn"]
        self.model.topics[lid] = Topic(lid, name, arn)

    def _subscription(self, lid: str) -> None:
        p = self.resolve(self._props(lid))
        protocol, endpoint, topic_arn = str(p.get("Protocol", "")), str(p.get("Endpoint", "")), str(p["TopicArn"])
        policy = p.get("RedrivePolicy")
        if isinstance(policy, str):
            policy = json.loads(policy)
        dlq_arn = (policy or {}).get("deadLetterTargetArn")
        if protocol == "lambda":
            fn_lid = self._function_lid(endpoint)
            if fn_lid is None:
                raise TemplateUnsupported(f"{lid}: function {endpoint!r} is not in the template")
            self.ensure(fn_lid)
            self.model.subscriptions[lid] = Subscription(lid, topic_arn, fn_lid, dlq_arn)
        elif protocol == "sqs" and self.sns is not None:
            attrs = {k: json.dumps(p[k]) if isinstance(p[k], dict) else str(p[k]).lower()
                     if isinstance(p[k], bool) else str(p[k])
                     for k in ("RawMessageDelivery", "FilterPolicy", "RedrivePolicy") if k in p}
            self.sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=endpoint, Attributes=attrs)
        else:
            self.model.ignored[f"{SUBSCRIPTION_TYPE} ({protocol or 'no protocol'})"] += 1


def _record_age(raw: Any) -> int | None:
    return None if raw is None or int(raw) < 0 else int(raw)


def provision(template: dict[str, Any], clients: dict[str, Any], **kw: Any) -> LocalModel:
    return Provisioner(template, clients, **kw).provision()
