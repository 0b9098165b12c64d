"""Redrive (invariant 3: "a rejected row can be re-driven and is then delivered"), against moto:
rows rejected by the poller or the editor are put back by PunctualClient.redrive and
`punctual redrive` as fresh rows, and delivered; what cannot be put back stays on the queue with
its reason (issue 28)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from punctual import PunctualClient
from punctual.cli import EXIT_PARTIAL, main
from punctual.core.keys import encode_sk
from punctual.core.models import ATTR_ATTEMPT, ATTR_CLAIM, ATTR_ENQUEUED_MS
from punctual.core.redrive import EXISTS, INVALID, SKIPPED, TRUNCATED, UNREADABLE
from punctual.core.usecases.poll import poll
from punctual.core.usecases.process_stream import process_stream
from tests.support import T0_MS, StreamReader
from tests.virtual_aws import RECEIVE_LATENCY_MS, STEP_MS, VirtualAws

HOUR = 3_600_000
PAYLOAD_AV = {"M": {"order": {"N": "42"}, "price": {"N": "123456789012345678.91"}, "blob": {"B": b"\x00\xffbin"},
                    "tags": {"SS": ["b", "a"]}, "nested": {"L": [{"BS": [b"\x01"]}, {"M": {"b": {"B": b"\x02"}}}]}}}
PAYLOAD = {"order": 42, "price": Decimal("123456789012345678.91"), "blob": "AP9iaW4=", "tags": ["a", "b"],
           "nested": [["AQ=="], {"b": "Ag=="}]}


@pytest.fixture
def client(stack):
    return PunctualClient(stack.settings.table_name, ddb=stack.ddb, sqs=stack.sqs, clock=stack.deps.clock)


def rejected_url(stack) -> str:
    return str(stack.settings.rejected_queue_url)


def queued(stack) -> int:
    """Messages on the rejected-rows queue (visible or not): what redrive left."""
    attrs = stack.sqs.get_queue_attributes(QueueUrl=rejected_url(stack), AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])


def visible_codes(stack, frozen) -> list[str]:
    """The codes of the rejected-rows messages a receive sees (received, then shown again)."""
    frozen.tick(0.001)  # moto shows a message whose visibility ends now only once time has moved
    resp = stack.sqs.receive_message(QueueUrl=rejected_url(stack), MaxNumberOfMessages=10, WaitTimeSeconds=0,
                                     VisibilityTimeout=0)
    return sorted(json.loads(m["Body"])["code"] if m["Body"].startswith("{") else "(not a rejection)"
                  for m in resp.get("Messages", []))


def put(stack, sk: str, payload_av, **extra) -> dict:
    item = {"pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": payload_av, **extra}
    stack.ddb.put_item(TableName=stack.settings.table_name, Item=item)
    return item


def rows(stack) -> dict[str, dict]:
    return {r["sk"]["S"]: r for r in stack.rows()}


def reject_as_undeliverable(stack, frozen, sk: str) -> None:
    """A row past due, sent max_attempts times and still there long after: the poll rejects it."""
    put(stack, sk, PAYLOAD_AV, **{ATTR_ENQUEUED_MS: {"N": str(T0_MS - 2 * HOUR)},
                                  ATTR_ATTEMPT: {"N": str(stack.settings.max_attempts)},
                                  ATTR_CLAIM: {"S": "an-old-poll"}})
    assert poll(stack.deps).rejected == 1
    assert rows(stack) == {}


def test_an_undeliverable_row_redriven_is_delivered(stack, frozen, client):
    """Put back as it was, the row would be rejected again (its punctual_attempt is past max):
    redrive strips the bookkeeping, restores the binary, and the system delivers it."""
    sk = encode_sk(T0_MS - HOUR, "order-42")
    reject_as_undeliverable(stack, frozen, sk)
    assert visible_codes(stack, frozen) == ["undeliverable"]
    sim = VirtualAws.over_moto(stack, frozen)
    sim.skip_stream()

    report = client.redrive(rejected_url(stack), wait_seconds=0)

    assert [t.key for t in report.redriven] == [sk] and report.left == []
    assert report.redriven[0].payload == PAYLOAD and report.redriven[0].attempt == 0
    # the fresh row: the rejected one without Punctual's bookkeeping, binary as bytes again
    assert rows(stack) == {sk: {"pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": PAYLOAD_AV}}
    assert queued(stack) == 0  # its message deleted
    got = sim.settle(2 * HOUR)
    assert [(e["key"], e["payload"]) for e in got] == [(sk, PAYLOAD)]
    # past due: the editor sent it at once (what a fresh insert of a past-due row gets)
    assert got[0]["delivered_at_ms"] - T0_MS <= STEP_MS + RECEIVE_LATENCY_MS
    assert rows(stack) == {}


def test_a_row_the_editor_rejected_for_its_bookkeeping_is_redriven(stack, frozen, client):
    """Any punctual_* attribute is stripped: a writer's bogus punctual_enqueued_ms made the row
    invalid; without it the row is valid (and written by a condition-checked put)."""
    reader = StreamReader(stack)
    sk = encode_sk(T0_MS + HOUR, "bk")
    put(stack, sk, PAYLOAD_AV, **{ATTR_ENQUEUED_MS: {"S": "soon"}, "punctual_note": {"S": "x"},
                                  "owner": {"S": "billing"}})
    assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}
    assert rows(stack) == {} and visible_codes(stack, frozen) == ["bad_bookkeeping"]

    report = client.redrive(rejected_url(stack), wait_seconds=0)

    assert [t.key for t in report.redriven] == [sk]
    assert rows(stack) == {sk: {"pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": PAYLOAD_AV,
                                "owner": {"S": "billing"}}}  # the user's own attributes kept
    assert queued(stack) == 0


def test_what_cannot_be_redriven_stays_on_the_queue_with_its_reason(stack, frozen, client):
    """Still invalid, truncated, a newer row with the key (the newer row wins), not a rejection
    record, a code not asked for: nothing written, every message kept and visible again."""
    reader = StreamReader(stack)
    invalid, huge, exists = (encode_sk(T0_MS + HOUR, n) for n in ("still-bad", "huge", "exists"))
    put(stack, invalid, {"S": "not a map"})
    put(stack, huge, {"M": {"blob": {"S": "x" * 390_000}}})
    put(stack, exists, PAYLOAD_AV, **{ATTR_ATTEMPT: {"S": "many"}})
    assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}
    assert rows(stack) == {}
    newer = put(stack, exists, {"M": {"v": {"S": "newer"}}})  # written again since its rejection
    stack.sqs.send_message(QueueUrl=rejected_url(stack), MessageBody="hello")

    report = client.redrive(rejected_url(stack), wait_seconds=0)

    assert report.redriven == []
    left = {(x.key, x.code, x.why) for x in report.left}
    assert left == {(invalid, "payload_not_map", INVALID), (huge, "oversize", TRUNCATED),
                    (exists, "bad_bookkeeping", EXISTS), (None, None, UNREADABLE)}
    assert {x.why: x.detail for x in report.left}[INVALID] == "payload_not_map: payload must be a map (M), got S"
    assert rows(stack) == {exists: newer}  # the newer row untouched
    assert queued(stack) == 4
    # shown again at once
    assert visible_codes(stack, frozen) == ["(not a rejection)", "bad_bookkeeping", "oversize", "payload_not_map"]

    # only the codes asked for: the others are skipped, not problems (a message that is not a
    # rejection record has no code: always reported)
    report = client.redrive(rejected_url(stack), codes=["oversize"], wait_seconds=0)
    assert sorted((x.code or "", x.why) for x in report.problems) == [("", UNREADABLE), ("oversize", TRUNCATED)]
    assert sorted(x.code for x in report.left if x.why == SKIPPED) == ["bad_bookkeeping", "payload_not_map"]


def test_the_limit_bounds_the_messages_read(stack, frozen, client):
    for n in range(3):
        reject_as_undeliverable(stack, frozen, encode_sk(T0_MS - HOUR + n, f"t{n}"))
        stack.drain(stack.settings.delay_queue_url)
    before = queued(stack)
    report = client.redrive(rejected_url(stack), limit=2, wait_seconds=0)
    assert len(report.redriven) == 2 and queued(stack) == before - 2 == 1
    with pytest.raises(ValueError, match="limit"):
        client.redrive(rejected_url(stack), limit=0)


def run_cli(capsys, tmp_path, stack, *argv):
    capsys.readouterr()  # the handlers' log lines so far
    code = main(["redrive", "--table", stack.settings.table_name, "--queue-url", rejected_url(stack),
                 "--wait", "0", "--state-dir", str(tmp_path), *argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def test_the_cli_prints_a_line_per_message_and_exits_5_when_it_left_some(stack, frozen, capsys, tmp_path):
    reader = StreamReader(stack)
    good, bad = encode_sk(T0_MS + HOUR, "good"), encode_sk(T0_MS + HOUR, "bad")
    put(stack, good, {"M": {}}, **{ATTR_ATTEMPT: {"N": "1.5"}})
    put(stack, bad, {"L": []})
    process_stream(reader.event(), stack.deps)

    code, out, err = run_cli(capsys, tmp_path, stack)

    assert code == EXIT_PARTIAL
    assert out == [f"redriven  {good}  due 2027-01-01T01:00:00.000Z",
                   f"left      {bad}  invalid: payload_not_map: payload must be a map (M), got L"
                   " (rejected as payload_not_map)"]
    assert err == ["(1 redriven, 1 left on the queue)"]
    frozen.tick(0.001)  # the message left is visible again (moto: once time has moved)
    # nothing left but what was asked to skip: exit 0
    code, out, err = run_cli(capsys, tmp_path, stack, "--code", "undeliverable")
    assert code == 0 and out == [f"left      {bad}  skipped: code 'payload_not_map' not asked for"
                                 " (rejected as payload_not_map)"]
    assert err == ["(0 redriven, 0 left on the queue, 1 skipped by --code)"]


def test_a_message_is_deleted_only_once_its_row_is_written(stack, frozen, client):
    """A put that fails (not a condition) stops the run: the message stays, visible again."""
    from botocore.exceptions import ClientError

    from tests.faults import Faults

    reject_as_undeliverable(stack, frozen, encode_sk(T0_MS - HOUR, "order-42"))
    Faults(stack.ddb).fail("PutItem", "AccessDeniedException")
    with pytest.raises(ClientError, match="AccessDenied"):
        client.redrive(rejected_url(stack), wait_seconds=0)
    assert rows(stack) == {} and visible_codes(stack, frozen) == ["undeliverable"]
