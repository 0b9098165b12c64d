"""Helpers shared by the poller's functional tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from punctual.client import PunctualClient
from punctual.core.arming import read_arm
from punctual.core.cron import one_shot_cron, parse_one_shot_cron
from punctual.core.keys import encode_sk
from punctual.core.models import item_key
from tests.support import T0_MS, Stack, client, pointers_of


def sk(offset_ms: int, task_id: str) -> str:
    """The sort key of a task due ``offset_ms`` after T0 (:func:`sk_at` takes the due time itself)."""
    return encode_sk(T0_MS + offset_ms, task_id)


def sk_at(due_ms: int, task_id: str = "t") -> str:
    """The sort key of a task due at ``due_ms`` (epoch ms)."""
    return encode_sk(due_ms, task_id)


class SentLog:
    """Records every SendMessageBatch entry actually handed to SQS (delay and body)."""

    def __init__(self, sqs: Any):
        self.entries: list[dict[str, Any]] = []
        self.calls = 0
        sqs.meta.events.register("provide-client-params.sqs.SendMessageBatch", self._capture)

    def _capture(self, params: dict[str, Any], **_: Any) -> None:
        self.calls += 1
        assert len(params["Entries"]) <= 10
        assert len({e["Id"] for e in params["Entries"]}) == len(params["Entries"])
        self.entries += params["Entries"]

    def delays(self) -> dict[str, int]:
        """sk -> DelaySeconds of the last entry sent for it (a group's rows share its entry's)."""
        return {p["sk"]: e["DelaySeconds"] for e in self.entries for p in pointers_of(json.loads(e["MessageBody"]))}

    def sks(self) -> list[str]:
        """The rows of every entry sent, in order."""
        return [p["sk"] for e in self.entries for p in pointers_of(json.loads(e["MessageBody"]))]


def delay_bodies(stack: Stack) -> list[dict[str, Any]]:
    """The visible delay-queue messages as one pointer per row."""
    return stack.pointers(stack.settings.delay_queue_url)


def rule_state(stack: Stack) -> tuple[str, int | None]:
    """(State, armed minute) of the rule, checked against the meta row."""
    rule = stack.rule()
    meta = read_arm(stack.ddb, stack.settings, stack.deps.clock)
    if rule["State"] == "DISABLED":
        assert meta.armed_ms is None
        return "DISABLED", None
    minute = parse_one_shot_cron(rule["ScheduleExpression"])
    assert meta.armed_ms == minute
    assert rule["ScheduleExpression"] == one_shot_cron(minute)
    return rule["State"], minute


def put_many(stack: Stack, items: list[tuple[str, dict[str, Any]]]) -> None:
    """Raw BatchWriteItem in cdk-scheduler format (pk/sk/payload)."""
    for i in range(0, len(items), 25):
        reqs = [
            {"PutRequest": {"Item": {"pk": {"S": stack.settings.partition_for_key(k)}, "sk": {"S": k}, "payload": {"M": {
                key: {"S": str(v)} for key, v in payload.items()}}}}}
            for k, payload in items[i : i + 25]
        ]
        stack.ddb.batch_write_item(RequestItems={stack.settings.table_name: reqs})


def delete_rows(stack: Stack) -> None:
    """What the consumer does after delivery."""
    for item in stack.rows():
        stack.ddb.delete_item(TableName=stack.settings.table_name, Key=item_key(item))


def row_map(stack: Stack) -> dict[str, dict[str, Any]]:
    return {item["sk"]["S"]: item for item in stack.rows()}


def user(stack: Stack) -> PunctualClient:
    """The user's client, on a boto3 client of its own (:func:`before_handler_call` watches the
    handlers' clients, ``stack.ddb`` and ``stack.sqs``)."""
    return PunctualClient(stack.settings.table_name, ddb=client("dynamodb"), clock=stack.deps.clock)


def before_handler_call(stack: Stack, op: str, action: Callable[[], Any], when: str = "before") -> dict[str, Any]:
    """Run ``action`` once, right before (or ``when="after"``) a handler's first call of ``op``;
    what it returned or raised is in the dict this returns."""
    out: dict[str, Any] = {}

    def hook(model: Any, **_: Any) -> None:
        if model.name == op and "ran" not in out:
            out["ran"] = True
            try:
                out["result"] = action()
            except Exception as exc:  # noqa: BLE001 - the test looks at it
                out["error"] = exc

    for c in (stack.ddb, stack.sqs):
        c.meta.events.register(f"{when}-call.{c.meta.service_model.service_name}", hook)
    return out
