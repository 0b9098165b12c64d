"""event_format="cdk-scheduler" is byte-compatible with cdk-scheduler's published build: the body
Punctual sends for a row is the one cdk-scheduler 0.1.3's own sendEventsToSQSAndDeleteRecords.js
(vendored verbatim, tests/fixtures/cdk_scheduler/PROVENANCE.md) sends for it, run in Node; and
cdk-scheduler's own consumers read Punctual's body as they read theirs. Skipped without node."""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from punctual.core.models import cdk_scheduler_body, task_from_item

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cdk_scheduler"
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


def node(*args: str, stdin: object) -> object:
    proc = subprocess.run(["node", str(FIXTURES / "harness.js"), *args], input=json.dumps(stdin),
                          capture_output=True, text=True, timeout=60, check=True, cwd=FIXTURES,
                          env={**os.environ, "TZ": "UTC"})
    return json.loads(proc.stdout)


def fixture_row() -> dict:
    """cdk-scheduler's own test fixture: the NewImage of lib/functions/handleNearFuture/handleNearFuture.mock.json
    (github.com/guiyom-e/cdk-scheduler, cdk-scheduler/ at f5eb62c), its keys in sorted order."""
    return {"id": {"S": "4d53c62d-11d0-4659-8048-419fd8c0dca2"},
            "payload": {"M": {"message": {"S": "Test payload"}}},
            "pk": {"S": "scheduler"}, "sk": {"S": "1651240630745#4d53c62d-11d0-4659-8048-419fd8c0dca2"}}


def rich_row() -> dict:
    """Every attribute type, as a stream image carries it (binary as base64), map keys sorted."""
    return {"pk": {"S": "scheduler"}, "sk": {"S": "1798135200000#order-42"}, "payload": {"M": {
        "TestId": {"S": "t-42"},
        "big": {"N": "1E+3"}, "blob": {"B": "AP8="}, "blobs": {"BS": ["AQ==", "Ag=="]},
        "nested": {"M": {"list": {"L": [{"N": "-7"}, {"S": "a"}, {"M": {}}, {"L": []}, {"BOOL": False}]}}},
        "none": {"NULL": True}, "nums": {"NS": ["3", "1.5"]}, "ok": {"BOOL": True}, "price": {"N": "1.50"},
        "tags": {"SS": ["b", "a"]},
        "text": {"S": 'café "quoted" \\ back\nline\ttab\u0001ctl \u2028 😀 <&>'},
    }}}


def as_boto3_reads_it(row: dict) -> dict:
    """The same row as the consumer's Query returns it through boto3: binary as bytes."""
    row = copy.deepcopy(row)

    def walk(av: dict) -> None:
        (tag, val), = av.items()
        if tag == "B":
            av["B"] = base64.b64decode(val)
        elif tag == "BS":
            av["BS"] = [base64.b64decode(v) for v in val]
        elif tag == "M":
            for v in val.values():
                walk(v)
        elif tag == "L":
            for v in val:
                walk(v)

    walk(row["payload"])
    return row


ROWS = [fixture_row(), rich_row()]


def punctual_body(row: dict) -> str:
    return cdk_scheduler_body(task_from_item(row, "scheduler", "cdk-scheduler"))


def test_punctuals_body_is_the_bytes_cdk_schedulers_published_build_sends():
    theirs = node(stdin=ROWS)
    assert [punctual_body(row) for row in ROWS] == theirs
    assert [punctual_body(as_boto3_reads_it(row)) for row in ROWS] == theirs
    assert theirs[0] == '{"publicationTimestamp":"1651240630745","payload":{"M":{"message":{"S":"Test payload"}}}}'


def test_cdk_schedulers_consumers_read_punctuals_body():
    """Its two demo consumers: the test bench's (payload.M.TestId.S, parseInt(publicationTimestamp))
    and the Lambda integration's (parseInt, then payload logged): no parse error, the due time and
    the payload read back."""
    bodies = [punctual_body(row) for row in ROWS]
    assert all(isinstance(json.loads(b)["publicationTimestamp"], str) for b in bodies)  # typed string there
    for row, logged in zip(ROWS, node("consume", stdin={"bodies": bodies}), strict=True):
        due_ms = int(row["sk"]["S"].split("#")[0])
        due = datetime.fromtimestamp(due_ms / 1000, UTC)
        dashboard, dispatched, data = logged["info"]
        assert logged["error"] == []
        assert f"/ PublicationTimestamp: {due.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} " \
            in dashboard[0]
        test_id = row["payload"]["M"].get("TestId", {}).get("S", "unknown")
        assert f"/ Id: {test_id} " in dashboard[0]
        assert dispatched[0].startswith(
            f"The following event should have been dispatched at {due.hour}:{due.minute}:{due.second}:"
            f"{due.microsecond // 1000} ")
        assert json.loads(data[1]) == json.loads(json.dumps(row["payload"]))
