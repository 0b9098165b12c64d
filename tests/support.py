"""Test support: a moto-backed Punctual stack and a freezegun-driven clock."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import boto3

from punctual.core.config import Settings
from punctual.core.runtime import Deps
from punctual.lambda_events import stream_record

REGION = "us-east-1"
T0_MS = 1_798_761_600_000  # 2027-01-01T00:00:00Z


_SESSION: Any = None


def client(name: str) -> Any:
    """A boto3 client from one session kept across tests: mock_aws resets boto3's default
    session on every start, and a fresh session re-reads the service models (~30 ms a client)."""
    global _SESSION
    if _SESSION is None:
        _SESSION = boto3.session.Session(region_name=REGION)
    return _SESSION.client(name, region_name=REGION)


class FreezegunClock:
    """The project clock over a freezegun ``frozen_time`` factory: sleeping moves virtual time."""

    def __init__(self, frozen: Any):
        self.frozen = frozen

    def now_ms(self) -> int:
        return int(round(time.time() * 1000))

    def sleep_ms(self, ms: int) -> None:
        if ms > 0:
            self.frozen.tick(ms / 1000)


@dataclass
class Stack:
    deps: Deps
    ddb: Any
    sqs: Any
    events: Any
    settings: Settings
    delay_dlq_url: str
    delivery_dlq_url: str
    control_mirror_url: str = ""  # direct delivery: a queue subscribed to the control topic (raw)

    # -- rows -------------------------------------------------------------
    def put_raw(self, sk: str, payload: dict[str, Any] | None = None, **extra: Any) -> None:
        """Insert a row exactly as cdk-scheduler users do: pk/sk/payload in DynamoDB JSON."""
        item: dict[str, Any] = {"pk": {"S": self.settings.partition_for_key(sk)}, "sk": {"S": sk}}
        if payload is not None:
            item["payload"] = {"M": {k: {"S": str(v)} for k, v in payload.items()}}
        item.update(extra)
        self.ddb.put_item(TableName=self.settings.table_name, Item=item)

    def rows(self) -> list[dict[str, Any]]:
        """Every row of the scheduler's partitions (Settings.partitions), by partition then sk."""
        out: list[dict[str, Any]] = []
        for pk in self.settings.partitions:
            start = None
            while True:
                kw: dict[str, Any] = {
                    "TableName": self.settings.table_name,
                    "KeyConditionExpression": "pk = :p",
                    "ExpressionAttributeValues": {":p": {"S": pk}},
                    "ConsistentRead": True,
                }
                if start:
                    kw["ExclusiveStartKey"] = start
                page = self.ddb.query(**kw)
                out += page["Items"]
                start = page.get("LastEvaluatedKey")
                if not start:
                    break
        return out

    # -- queues -----------------------------------------------------------
    def drain(self, url: str, max_messages: int = 100_000) -> list[dict[str, Any]]:
        """Receive and delete every visible message (no long polling under a frozen clock)."""
        got: list[dict[str, Any]] = []
        while len(got) < max_messages:
            resp = self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0,
                AttributeNames=["All"], MessageAttributeNames=["All"],
            )
            msgs = resp.get("Messages", [])
            if not msgs:
                return got
            got += msgs
            self.sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)]
            )
        return got

    def bodies(self, url: str) -> list[dict[str, Any]]:
        return [json.loads(m["Body"]) for m in self.drain(url)]

    def pointers(self, url: str) -> list[dict[str, Any]]:
        """The row pointers of every visible delay-queue message, one per row (see pointers_of)."""
        return [p for body in self.bodies(url) for p in pointers_of(body)]

    def rule(self) -> dict[str, Any]:
        return self.events.describe_rule(Name=self.settings.rule_name)


def make_stack(settings: Settings | None = None, clock: Any = None) -> Stack:
    """Create the resources the construct defines, in moto (call inside ``mock_aws``)."""
    s = settings or Settings()
    ddb, sqs, events = client("dynamodb"), client("sqs"), client("events")
    ddb.create_table(
        TableName=s.table_name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )

    def queue(name: str, dlq_arn: str | None = None, max_receives: int = 10) -> str:
        attrs = {}
        if dlq_arn:
            attrs["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receives)})
        return sqs.create_queue(QueueName=name, Attributes=attrs)["QueueUrl"]

    def arn(url: str) -> str:
        return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    delay_dlq = queue("punctual-delay-dlq")
    delivery_dlq = queue("punctual-delivery-dlq")
    delay = queue("punctual-delay", arn(delay_dlq))
    delivery = queue("punctual-delivery", arn(delivery_dlq))
    rejected = queue("punctual-rejected")
    s = Settings(**{**s.__dict__, "delay_queue_url": delay, "delivery_queue_url": delivery, "rejected_queue_url": rejected})
    sns, mirror = None, ""
    if s.direct:  # no delay queue: the control topic, which the tests read through a queue subscribed to it
        sns = client("sns")
        topic = sns.create_topic(Name="punctual-control")["TopicArn"]
        mirror = queue("punctual-control-mirror")
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn(mirror), Attributes={"RawMessageDelivery": "true"})
        s = Settings(**{**s.__dict__, "delay_queue_url": "", "control_topic_arn": topic})
    events.put_rule(Name=s.rule_name, ScheduleExpression="cron(0 0 1 1 ? 2199)", State="DISABLED")
    events.put_targets(
        Rule=s.rule_name,
        Targets=[{"Id": "poller", "Arn": f"arn:aws:lambda:{REGION}:123456789012:function:punctual-poller"}],
    )
    from punctual.core.clock import SystemClock

    deps = Deps(settings=s, clock=clock or SystemClock(), ddb=ddb, sqs=sqs, events=events, sns=sns)
    return Stack(deps=deps, ddb=ddb, sqs=sqs, events=events, settings=s,
                 delay_dlq_url=delay_dlq, delivery_dlq_url=delivery_dlq, control_mirror_url=mirror)


# -- DynamoDB stream -> Lambda event (editor tests) ----------------------------------------


class StreamReader:
    """Reads the table's real moto stream and wraps new records in the Lambda event shape.

    Each :meth:`event` returns only records written since the previous call (one
    cursor per shard), as ``{"Records": [...]}`` with ``eventName``, ``dynamodb.Keys``,
    ``NewImage``/``OldImage`` (binary as base64 text, like Lambda) and ``SequenceNumber``.
    Needs ``AWS_ACCOUNT_ID_ENDPOINT_MODE=disabled`` (set in conftest).
    """

    def __init__(self, stack: Stack):
        self.stack = stack
        self.streams = client("dynamodbstreams")
        table = stack.ddb.describe_table(TableName=stack.settings.table_name)["Table"]
        self.arn = table["LatestStreamArn"]
        self._iters: dict[str, str] = {}
        self._seen: set[str] = set()

    def _shard_iterators(self) -> dict[str, str]:
        desc = self.streams.describe_stream(StreamArn=self.arn)["StreamDescription"]
        for shard in desc["Shards"]:
            sid = shard["ShardId"]
            if sid not in self._iters:
                self._iters[sid] = self.streams.get_shard_iterator(
                    StreamArn=self.arn, ShardId=sid, ShardIteratorType="TRIM_HORIZON"
                )["ShardIterator"]
        return self._iters

    def records(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for sid, it in list(self._shard_iterators().items()):
            resp = self.streams.get_records(ShardIterator=it)
            self._iters[sid] = resp.get("NextShardIterator") or it
            for rec in resp.get("Records", []):
                seq = rec["dynamodb"]["SequenceNumber"]
                if seq not in self._seen:
                    self._seen.add(seq)
                    out.append(lambda_record(rec, self.arn))
        return out

    def event(self) -> dict[str, Any]:
        return {"Records": self.records()}

    def skip(self) -> None:
        """Forget everything written so far (e.g. set-up rows)."""
        self.records()


def lambda_record(rec: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A boto3 dynamodbstreams record -> the JSON Lambda hands to the function."""
    return stream_record(rec, stream_arn, REGION)


def pointers_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A delay-queue body as single-row pointers ({pk, sk, due_ms, attempt, enqueued_ms}): a
    DelayGroup gives one per row, a DelayMessage is one already."""
    if "rows" not in body:
        return [body]
    return [{"pk": body["pk"], "sk": sk, "due_ms": int(sk[:13]), "attempt": attempt, "enqueued_ms": body["enqueued_ms"]}
            for sk, attempt in body["rows"]]
