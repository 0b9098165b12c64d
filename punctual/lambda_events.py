"""Lambda's event sources: the events it hands to functions and what it does with their answers.

The rules, as pure functions; the state machines that apply them are
:mod:`punctual.event_sources`, which every emulation of AWS runs (the local stack's real-time
drivers, the benchmark's simulator, the tests' virtual-time harness):

- events: an SQS ReceiveMessage message -> an SQS event record; a dynamodbstreams GetRecords
  record -> a DynamoDB stream event record (binary attribute values as base64 text); a rule's
  firing -> a Scheduled Event;
- answers: which SQS messages stay on the queue after a batch (:func:`sqs_messages_to_keep`),
  where a stream shard's checkpoint moves (:func:`stream_records_done`, through the filter:
  :func:`filtered_batch_done`), what a stream shard retries and discards after a failure
  (:func:`stream_after_failure`), when a rule's one-shot
  cron fires (:func:`armed_minute`), and when a failed asynchronous invocation is retried
  (:data:`ASYNC_RETRY_DELAYS_MS`);
- an instance dying mid-invocation, as fault injectors raise it (:class:`InjectedCrash`).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from punctual.core.cron import parse_one_shot_cron

T = TypeVar("T")


class InjectedCrash(BaseException):
    """The function's instance died mid-invocation, at a point a fault injector chose (the
    benchmark's faults scenario, tests/faults.py). A BaseException, so no handler's
    ``except Exception`` can swallow it: Lambda sees a failed invocation, nothing after it runs."""


# Lambda's asynchronous invocation (the rule's target): on a function error it retries twice,
# waiting 1 minute before the first retry and 2 minutes before the second.
ASYNC_RETRY_DELAYS_MS: tuple[int, ...] = (60_000, 120_000)


def async_retry_delays(max_event_age_ms: int, delays_ms: tuple[int, ...] = ASYNC_RETRY_DELAYS_MS) -> tuple[int, ...]:
    """The retries of a failed asynchronous invocation that come before its maximum age."""
    out: list[int] = []
    for delay in delays_ms:
        if sum(out) + delay > max_event_age_ms:
            break
        out.append(delay)
    return tuple(out)


def sqs_record(msg: dict[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """One Lambda SQS event record from a ReceiveMessage message."""
    attrs = msg.get("Attributes", {})
    record_attrs = {
        k: attrs[k]
        for k in ("ApproximateReceiveCount", "SentTimestamp", "SenderId", "ApproximateFirstReceiveTimestamp",
                  "MessageGroupId", "MessageDeduplicationId", "SequenceNumber", "AWSTraceHeader")
        if k in attrs
    }
    message_attrs = {}
    for name, value in (msg.get("MessageAttributes") or {}).items():
        out = {"dataType": value.get("DataType"), "stringListValues": [], "binaryListValues": []}
        if "StringValue" in value:
            out["stringValue"] = value["StringValue"]
        if "BinaryValue" in value:
            out["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode("ascii")
        message_attrs[name] = out
    return {
        "messageId": msg["MessageId"],
        "receiptHandle": msg["ReceiptHandle"],
        "body": msg["Body"],
        "attributes": record_attrs,
        "messageAttributes": message_attrs,
        "md5OfBody": msg.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def _lambda_av(value: Any) -> Any:
    """boto3 decodes binary attribute values to bytes; Lambda events carry base64 text."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {k: _lambda_av(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_lambda_av(v) for v in value]
    return value


def stream_record(rec: dict[str, Any], stream_arn: str, region: str) -> dict[str, Any]:
    """One Lambda DynamoDB stream event record from a dynamodbstreams GetRecords record."""
    ddb = dict(rec.get("dynamodb", {}))
    created = ddb.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        created = created.timestamp()
    if isinstance(created, int | float) and not isinstance(created, bool):
        # epoch seconds, "rounded down to the closest second" (DynamoDB Streams API reference,
        # StreamRecord), as a number like Lambda's event's (1479499740.0)
        ddb["ApproximateCreationDateTime"] = float(math.floor(created))
    for k in ("Keys", "NewImage", "OldImage"):
        if k in ddb:
            ddb[k] = _lambda_av(ddb[k])
    out = {
        "eventID": rec.get("eventID"),
        "eventName": rec.get("eventName"),
        "eventVersion": rec.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": rec.get("awsRegion", region),
        "dynamodb": ddb,
        "eventSourceARN": stream_arn,
    }
    if "userIdentity" in rec:
        out["userIdentity"] = rec["userIdentity"]
    return out


def scheduled_event(rule_arn: str, minute_ms: int, event_id: str) -> dict[str, Any]:
    """The event EventBridge hands a rule's target when its schedule fires for ``minute_ms``."""
    return {
        "version": "0",
        "id": event_id,  # unique per firing; Lambda's retries of the invocation keep it
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": rule_arn.split(":")[4],
        "time": datetime.fromtimestamp(minute_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": rule_arn.split(":")[3],
        "resources": [rule_arn],
        "detail": {},
    }


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def sns_event(topic_arn: str, message: str, message_id: str, published_ms: int) -> dict[str, Any]:
    """The event SNS invokes a subscribed function with, one record per message (Lambda developer
    guide, "Using Lambda with Amazon SNS"; SNS invokes asynchronously, one message at a time)."""
    return {"Records": [{
        "EventVersion": "1.0", "EventSource": "aws:sns", "EventSubscriptionArn": f"{topic_arn}:subscription",
        "Sns": {"Type": "Notification", "MessageId": message_id, "TopicArn": topic_arn, "Subject": None,
                "Message": message, "Timestamp": _iso(published_ms), "MessageAttributes": {}},
    }]}


def async_failure_record(event: Mapping[str, Any], function_arn: str, attempts: int, now_ms: int,
                         error: str = "") -> dict[str, Any]:
    """What Lambda sends an asynchronous invocation's OnFailure destination when its attempts ran
    out (Lambda developer guide, "Asynchronous invocation": the invocation record)."""
    return {
        "version": "1.0",
        "timestamp": _iso(now_ms),
        "requestContext": {"requestId": f"req-{now_ms}", "functionArn": f"{function_arn}:$LATEST",
                           "condition": "RetriesExhausted", "approximateInvokeCount": attempts},
        "requestPayload": dict(event),
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "responsePayload": {"errorMessage": error[:256], "errorType": "Error"},
    }


# "Amazon SNS destinations have a message size limit of 256 KB. If the combined size of the function
# request and response payload exceeds the limit, Lambda will drop the payload when sending OnFailure
# event to the destination" (Lambda API reference, "OnFailure").
SNS_DESTINATION_MAX_BYTES = 262_144


def for_sns_destination(record: Mapping[str, Any]) -> dict[str, Any]:
    """An invocation record as Lambda sends it to an SNS destination: without its request and
    response payloads when the whole would pass SNS's message size limit (the record of a
    retried SNS event nests that event, so a chain of them would grow)."""
    if len(json.dumps(record).encode("utf-8")) <= SNS_DESTINATION_MAX_BYTES:
        return dict(record)
    return {k: v for k, v in record.items() if k not in ("requestPayload", "responsePayload")}


def stream_failure_record(records: Sequence[Mapping[str, Any]], stream_arn: str, function_arn: str,
                          attempts: int, now_ms: int) -> dict[str, Any]:
    """What Lambda sends a DynamoDB stream mapping's OnFailure destination for records it gave up
    on (Lambda developer guide, "DynamoDB Streams": the invocation record, metadata only: the rows
    themselves are in the table)."""
    seqs = [str(r.get("dynamodb", {}).get("SequenceNumber", "")) for r in records]
    return {
        "requestContext": {"requestId": f"req-{now_ms}", "functionArn": function_arn,
                           "condition": "RetryAttemptsExhausted", "approximateInvokeCount": attempts},
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "version": "1.0",
        "timestamp": _iso(now_ms),
        "DDBStreamBatchInfo": {
            "shardId": "shardId-00000000000000000000-00000000",
            "startSequenceNumber": seqs[0] if seqs else "",
            "endSequenceNumber": seqs[-1] if seqs else "",
            "approximateArrivalOfFirstRecord": _iso(now_ms),
            "approximateArrivalOfLastRecord": _iso(now_ms),
            "batchSize": len(records),
            "streamArn": stream_arn,
        },
    }


def armed_minute(rule: Mapping[str, Any]) -> int | None:
    """The minute (epoch ms) a rule (DescribeRule's answer) fires in; None when it is disabled
    or its schedule is not a one-shot cron (which fires once, in that minute)."""
    expr = rule.get("ScheduleExpression")
    if rule.get("State") != "ENABLED" or not expr:
        return None
    try:
        return parse_one_shot_cron(expr)
    except ValueError:
        return None


def _reported_failures(result: Any, ids: Sequence[str]) -> set[str] | None:
    """The identifiers a partial batch response reports failed; None: the response is invalid
    (``batchItemFailures`` not a list, or naming an unknown or empty identifier), which fails the
    whole batch. No dict or no ``batchItemFailures``: every record succeeded."""
    if not isinstance(result, dict):
        return set()
    failures = result.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        return None
    out = set()
    known = set(ids)
    for f in failures:
        ident = f.get("itemIdentifier") if isinstance(f, dict) else None
        if not ident or ident not in known:
            return None
        out.add(ident)
    return out


def sqs_messages_to_keep(result: Any, message_ids: Sequence[str], report_failures: bool = True) -> set[str]:
    """The message ids the SQS event source leaves on the queue after the function returned
    ``result`` for a batch of ``message_ids`` (it deletes the others). Without
    ReportBatchItemFailures a returned batch succeeded whole; with it, the ids reported failed
    stay, and an invalid response keeps the whole batch. (A function error keeps the whole batch
    too: the caller knows, there is no result.)"""
    if not report_failures:
        return set()
    failed = _reported_failures(result, message_ids)
    return set(message_ids) if failed is None else failed


def stream_records_done(result: Any, sequence_numbers: Sequence[str], report_failures: bool = True) -> int:
    """How many leading records of a stream batch the function's ``result`` completes: the shard's
    checkpoint moves past them and the batch is retried from the first failed sequence number
    (0: all of it, as for an invalid response; the batch's length: it succeeded)."""
    if not report_failures:
        return len(sequence_numbers)
    failed = _reported_failures(result, sequence_numbers)
    if failed is None:
        return 0
    if not failed:
        return len(sequence_numbers)
    return min(i for i, seq in enumerate(sequence_numbers) if seq in failed)


def filtered_batch_done(passing: Sequence[int], batch_len: int, passing_done: int) -> int:
    """How many leading records of a stream batch of ``batch_len`` are done when the function was
    invoked with only the records at positions ``passing`` (the mapping's filter criteria; the
    others count as processed) and completed the first ``passing_done`` of them
    (:func:`stream_records_done`): the checkpoint stops at the first passing record not done."""
    if passing_done >= len(passing):
        return batch_len
    return passing[passing_done]


def stream_after_failure(remaining: Sequence[T], failed_attempts: int, max_retries: int) -> tuple[list[T], T | None, int]:
    """What a stream event source does after an attempt that left ``remaining`` records undone
    (the checkpoint onwards, not empty), the ``failed_attempts``-th failed attempt in a row:
    ``(records it goes on with, the record it discards or None, failed attempts from now)``.

    Within ``max_retries`` (MaximumRetryAttempts; negative: no limit) it retries from the
    checkpoint. Past it, it discards the record at the checkpoint alone (its metadata goes to the
    OnFailure destination) and goes on with the rest, counting afresh: the construct sets
    BisectBatchOnError, and Lambda's splits do not count against the retries, so a record that
    keeps failing is isolated before it is discarded (a partial response already puts it first).
    The emulations do not split batches: after function errors (no partial response) the record
    they discard is the batch's first, which may not be the one failing (pessimistic: more is
    left to the poller). The rows stay in the table either way: the poller still delivers what the
    editor skipped, at its next window (tests/reliability/test_stream_give_up.py)."""
    if not remaining:
        raise ValueError("nothing remains to retry")
    if 0 <= max_retries < failed_attempts:
        return list(remaining[1:]), remaining[0], 0
    return list(remaining), None, failed_attempts
