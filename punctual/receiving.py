"""Reading a queue as a consumer does: receive a batch, handle it, then delete it.

Shared by ``punctual watch`` (the delivery queue) and ``punctual demo`` (the delivery and
rejected queues, the dead-letter queues). Takes a boto3 SQS client; parsing stays with the caller.
"""

from __future__ import annotations

from typing import Any


def receive(sqs: Any, url: str, max_messages: int = 10, wait_s: int = 0) -> list[dict[str, Any]]:
    """Up to ``max_messages`` (1-10) messages, waiting up to ``wait_s`` seconds for the first."""
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=max_messages, WaitTimeSeconds=wait_s)
    return list(resp.get("Messages", []))


def delete(sqs: Any, url: str, messages: list[dict[str, Any]]) -> None:
    """Delete a received batch (nothing to do for an empty one)."""
    if messages:
        sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
