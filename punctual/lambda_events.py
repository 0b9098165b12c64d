"""The event records Lambda hands to functions, built from what the AWS APIs return.

One implementation shared by the local stack's drivers, the benchmark simulator and the
tests: an SQS ReceiveMessage message -> an SQS event record; a dynamodbstreams GetRecords
record -> a DynamoDB stream event record (binary attribute values as base64 text).
"""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any


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
        ddb["ApproximateCreationDateTime"] = created.timestamp()
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
