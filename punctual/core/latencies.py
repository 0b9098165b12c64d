"""The AWS-side latencies each function measures at its start, from Lambda's event alone (pure).

The design rests on a few behaviours AWS does not document as figures: how soon Lambda's SQS event
source hands a message to the consumer once its delay ends, how far into its minute a rule's
one-shot cron starts the poller, how long a stream record takes to reach the editor. Each function
measures its own from attributes Lambda's event already carries, and emits them with its metrics
(docs/construct.md, "Self-measurement"): no request, no clock but the function's.

Every latency is the function's start minus a time AWS stamped, never below 0: CloudWatch gives no
percentile for a period holding a negative value, and a time stamped by another host may run a few
ms ahead of the function's clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .cron import floor_minute


def elapsed_ms(start_ms: int, since_ms: int) -> int:
    """ms from ``since_ms`` to ``start_ms``, 0 when ``since_ms`` is later (an early arrival, or
    another host's clock ahead of ours)."""
    return max(0, start_ms - since_ms)


def _int(raw: object) -> int | None:
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return None


def planned_visible_ms(attributes: object, delay_seconds: int | None) -> int | None:
    """When SQS planned a delay-queue message to become visible: its ``SentTimestamp`` (SQS's own
    clock when it took the send: the delay counts from there) plus ``delay_seconds`` (the
    DelaySeconds of the send, carried in the body: Lambda's event does not carry it). Only for a
    message received for the first time (``ApproximateReceiveCount`` 1): a later receive follows a
    put-back or a visibility timeout, not the plan. None when any of these is unknown.

    ``ApproximateFirstReceiveTimestamp`` is not used: it would leave out what happens between SQS
    handing the message to Lambda's poller and the function starting (the invocation, a cold start),
    the part of the pick-up the consumer's wake (``wake_early_ms``) must cover too."""
    if delay_seconds is None or not isinstance(attributes, Mapping):
        return None
    sent = _int(attributes.get("SentTimestamp"))
    if sent is None or _int(attributes.get("ApproximateReceiveCount")) != 1:
        return None
    return sent + delay_seconds * 1000


def stream_created_ms(record: object) -> int | None:
    """A DynamoDB stream record's ``ApproximateCreationDateTime`` in epoch ms: Lambda's event gives
    epoch seconds, which DynamoDB Streams rounds down to the second (API reference,
    ``StreamRecord``), so the time is up to 999 ms before the write. None when absent."""
    data = record.get("dynamodb") if isinstance(record, Mapping) else None
    created = data.get("ApproximateCreationDateTime") if isinstance(data, Mapping) else None
    if isinstance(created, bool) or not isinstance(created, int | float):
        return None
    return int(created) * 1000


def scheduled_minute_ms(event: Any) -> int | None:
    """The minute (epoch ms) an EventBridge rule fired for, from its Scheduled Event's ``time``
    (whole seconds; the rule fires within its minute, so the minute is the time's either way), or
    None for any other event (the control topic's, a direct invoke: nothing fired on a schedule)."""
    if not isinstance(event, Mapping) or event.get("detail-type") != "Scheduled Event":
        return None
    raw = event.get("time")
    if not isinstance(raw, str):
        return None
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return floor_minute(int(moment.timestamp() * 1000))
