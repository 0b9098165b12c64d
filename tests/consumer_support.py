"""Drive the consumer like Lambda's SQS event source mapping does, against the moto stack.

``receive_event`` receives up to 10 visible delay-queue messages (with all attributes)
and converts them to the Lambda SQS event shape; ``run_consumer`` calls ``consume``
and then deletes every record not reported in ``batchItemFailures`` (what the event
source mapping does with ReportBatchItemFailures on). If ``consume`` raises (a crash),
nothing is deleted: the whole batch comes back after the visibility timeout.
"""

from __future__ import annotations

import json
from typing import Any

from punctual.core.keys import encode_sk
from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS, DelayGroup, DelayMessage
from punctual.core.usecases.consume import consume
from punctual.lambda_events import sqs_messages_to_keep, sqs_record
from tests.support import REGION, Stack

VISIBILITY_TIMEOUT_S = 30  # moto's default for the delay queue


def queue_arn(stack: Stack, url: str) -> str:
    return stack.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def to_lambda_record(msg: dict[str, Any], arn: str) -> dict[str, Any]:
    return sqs_record(msg, arn, REGION)


def receive_event(stack: Stack, max_messages: int = 10) -> dict[str, Any]:
    url = stack.settings.delay_queue_url
    resp = stack.sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=max_messages, WaitTimeSeconds=0, AttributeNames=["All"]
    )
    arn = queue_arn(stack, url)
    return {"Records": [to_lambda_record(m, arn) for m in resp.get("Messages", [])]}


def ack(stack: Stack, event: dict[str, Any], response: dict[str, Any]) -> None:
    """Delete what the SQS event source would after ``response`` (ReportBatchItemFailures on)."""
    keep = sqs_messages_to_keep(response, [r["messageId"] for r in event["Records"]])
    entries = [
        {"Id": str(i), "ReceiptHandle": r["receiptHandle"]}
        for i, r in enumerate(event["Records"])
        if r["messageId"] not in keep
    ]
    if entries:
        stack.sqs.delete_message_batch(QueueUrl=stack.settings.delay_queue_url, Entries=entries)


def run_consumer(stack: Stack, event: dict[str, Any] | None = None) -> dict[str, Any]:
    """One invocation on ``event`` (default: the next received batch); acks like the ESM."""
    event = receive_event(stack) if event is None else event
    response = consume(event, stack.deps)
    ack(stack, event, response)
    return response


def schedule(stack: Stack, due_ms: int, task_id: str, payload: dict[str, Any] | None = None) -> str:
    """Insert a row in the cdk-scheduler format; returns its sk."""
    sk = encode_sk(due_ms, task_id)
    stack.put_raw(sk, payload if payload is not None else {"task": task_id})
    return sk


def mark_claimed(stack: Stack, sk: str, attempt: int, now_ms: int) -> None:
    """What the poller's or the editor's claim leaves on a row it sends (store.claim): its send
    mark and attempt; a row that is not there stays absent."""
    try:
        stack.ddb.update_item(
            TableName=stack.settings.table_name, Key={"pk": {"S": stack.settings.partition_for_key(sk)}, "sk": {"S": sk}},
            UpdateExpression="SET #e = :now, #a = :att", ConditionExpression="attribute_exists(sk)",
            ExpressionAttributeNames={"#e": ATTR_ENQUEUED_MS, "#a": ATTR_ATTEMPT},
            ExpressionAttributeValues={":now": {"N": str(now_ms)}, ":att": {"N": str(attempt)}})
    except stack.ddb.exceptions.ConditionalCheckFailedException:
        pass


def set_payload(stack: Stack, sk: str, payload_av: dict[str, Any]) -> None:
    """Change a row's payload in place (its send mark kept: the same task, a new payload)."""
    stack.ddb.update_item(
        TableName=stack.settings.table_name, Key={"pk": {"S": stack.settings.partition_for_key(sk)}, "sk": {"S": sk}},
        UpdateExpression="SET payload = :p", ExpressionAttributeValues={":p": payload_av})


def enqueue(stack: Stack, sk: str, due_ms: int, delay_seconds: int, attempt: int = 1) -> None:
    """Claim the row and send the pointer message the poller/editor would send, with a chosen
    DelaySeconds."""
    now = stack.deps.clock.now_ms()
    mark_claimed(stack, sk, attempt, now)
    body = DelayMessage(pk=stack.settings.partition_key_value, sk=sk, due_ms=due_ms, attempt=attempt,
                        enqueued_ms=now).body()
    stack.sqs.send_message(QueueUrl=stack.settings.delay_queue_url, MessageBody=body, DelaySeconds=delay_seconds)


def enqueue_group(stack: Stack, rows: list[tuple[str, int]], delay_seconds: int = 0) -> None:
    """Claim ``rows`` = (sk, due_ms), sorted by due, and send one group message for them, as
    claim_and_send does."""
    now = stack.deps.clock.now_ms()
    for sk, _ in rows:
        mark_claimed(stack, sk, 1, now)
    body = DelayGroup.body_of(stack.settings.partition_key_value, [(sk, due, 1) for sk, due in rows], now)
    stack.sqs.send_message(QueueUrl=stack.settings.delay_queue_url, MessageBody=body, DelaySeconds=delay_seconds)


def delivered(stack: Stack) -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in stack.drain(stack.settings.delivery_queue_url)]
