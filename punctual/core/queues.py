"""SQS sends: SendMessageBatch by 10, failed entries retried under the one policy (retry.py).

Takes a client; never imports boto3.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import observability as obs
from .clock import Clock
from .errors import error_code
from .parallel import pmap
from .retry import ATTEMPTS, call_with_retry, retry_unprocessed

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

BATCH = 10
# SendMessageBatch: the bodies of one call total at most 256 KiB.
MAX_BATCH_BYTES = 262_144


@dataclass(frozen=True)
class Outgoing:
    """One message to send; ``ref`` is the caller's handle, returned on failure."""

    ref: object
    body: str
    delay_seconds: int = 0
    # The body as sent, from (the clock right before the call, the DelaySeconds sent): for a body
    # that says when it becomes visible (direct delivery) or the DelaySeconds it was sent with (a
    # delay-queue pointer). ``body`` is then its size estimate (no smaller).
    render: Callable[[int, int], str] | None = None


@dataclass(frozen=True)
class Failed:
    ref: object
    code: str
    message: str
    # SQS refused the message for its own content (SenderFault): sending it again cannot help. Else
    # SQS (or the way to it) failed: the message is fine and a later send may pass.
    sender_fault: bool = False


def send_all(
    sqs: SQSClient,
    queue_url: str,
    messages: Sequence[Outgoing],
    clock: Clock,
    attempts: int = ATTEMPTS,
    delay_for: Callable[[Outgoing], int] | None = None,
    workers: int = 1,
) -> list[Failed]:
    """Send every message, 10 per call (and 256 KiB), ``workers`` calls at a time; return only
    those that still failed.

    Entry ids are positions within the call ("0".."9"), so they cannot collide.
    ``delay_for`` recomputes DelaySeconds right before each call (the clock moves
    while earlier batches are sent); it may only shrink the planned delay.
    """
    parts = pmap(lambda batch: _send_batch(sqs, queue_url, batch, clock, attempts, delay_for),
                 batches(messages), workers)
    return [f for part in parts for f in part]


def batches(messages: Sequence[Outgoing], max_bytes: int = MAX_BATCH_BYTES) -> list[list[Outgoing]]:
    """Consecutive groups of at most 10 messages whose bodies total at most ``max_bytes``
    (SQS refuses a whole SendMessageBatch over that size with BatchRequestTooLong)."""
    out: list[list[Outgoing]] = []
    current: list[Outgoing] = []
    size = 0
    for msg in messages:
        n = len(msg.body.encode("utf-8"))
        if current and (len(current) == BATCH or size + n > max_bytes):
            out.append(current)
            current, size = [], 0
        current.append(msg)
        size += n
    if current:
        out.append(current)
    return out


def _send_batch(sqs, queue_url, batch, clock, attempts, delay_for) -> list[Failed]:
    """One SendMessageBatch call and its retries under the one policy (retry.retry_unprocessed): a
    retryable error or retryable failed entries use an attempt; entries failed by our own fault
    (SenderFault) are not retried."""
    permanent: list[Failed] = []
    last_failure: dict[int, Failed] = {}  # by id() of the message: its latest retryable failure
    sent: list[Outgoing] = batch  # what the latest call carried

    def send(pending: list[Outgoing]) -> list[Outgoing]:
        nonlocal sent
        sent = pending
        entries = [_entry(i, msg, int(delay_for(msg) if delay_for else msg.delay_seconds), clock)
                   for i, msg in enumerate(pending)]
        resp = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        retry: list[Outgoing] = []
        for f in resp.get("Failed") or []:
            msg = pending[int(f["Id"])]
            fault = bool(f.get("SenderFault"))
            fail = Failed(msg.ref, str(f.get("Code", "Unknown")), str(f.get("Message", "")), sender_fault=fault)
            if fault:
                permanent.append(fail)  # our request is wrong: retrying cannot help
            else:
                retry.append(msg)
                last_failure[id(msg)] = fail
        return retry

    try:
        left = retry_unprocessed(send, batch, clock, attempts)
    except Exception as exc:
        code = str(error_code(exc) or type(exc).__name__)
        return permanent + [Failed(m.ref, code, str(exc)[:300]) for m in sent]
    return permanent + [last_failure[id(m)] for m in left]


def _entry(i: int, msg: Outgoing, delay: int, clock: Clock) -> dict[str, object]:
    body = msg.render(clock.now_ms(), delay) if msg.render is not None else msg.body
    return {"Id": str(i), "MessageBody": body, "DelaySeconds": delay}


def send_one(sqs: SQSClient, queue_url: str, body: str, clock: Clock, delay_seconds: int = 0) -> None:
    """One SendMessage under the one retry policy (raises what still fails)."""
    call_with_retry(lambda: sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay_seconds),
                    clock)


def backlog_messages(sqs: SQSClient, queue_url: str, clock: Clock) -> int | None:
    """SQS's approximate count of messages waiting for the consumer: ready to be received, or
    received and not yet deleted (in flight: a consumer throttled or failing keeps them so; not the
    delayed ones); None when the count cannot be read (the caller then assumes no backlog)."""
    try:
        attrs = call_with_retry(
            lambda: sqs.get_queue_attributes(  # type: ignore[attr-defined]
                QueueUrl=queue_url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]),
            clock, attempts=3,
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])
    except Exception as exc:  # noqa: BLE001 - a failed read must not stop the poll
        obs.log("WARNING", "delay queue backlog unknown", error=error_code(exc))
        return None
