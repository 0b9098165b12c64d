"""Consumer against moto in virtual time: never early, cancellation, payload at delivery,
partial batches, poison messages and crash injection."""

from __future__ import annotations

import dataclasses
import io
import json
from types import SimpleNamespace

import pytest
from punctual.functions.consumer.handler import handler

from punctual.core import observability as obs
from punctual.core.config import to_environment
from punctual.core.models import ATTR_ENQUEUED_MS, event_id
from punctual.core.runtime import reset_default_deps
from punctual.core.usecases.consume import consume, queue_url_from_arn
from tests.consumer_support import (
    VISIBILITY_TIMEOUT_S,
    delivered,
    enqueue,
    enqueue_group,
    mark_claimed,
    receive_event,
    run_consumer,
    schedule,
    set_payload,
)
from tests.faults import Faults, InjectedCrash, PartialFailSqs, capture_sends
from tests.support import T0_MS

EVENT_FIELDS = {
    "event_id", "id", "key", "due", "due_ms", "payload", "delivered_at", "delivered_at_ms",
    "lateness_ms", "attempt", "publicationTimestamp",
}


@pytest.fixture
def logs():
    buf = io.StringIO()
    obs.set_stream(buf)

    def lines():
        return [json.loads(line) for line in buf.getvalue().splitlines() if line.strip()]

    yield lines
    obs.set_stream(None)


def metric_values(lines, name):
    return [rec[name] for rec in lines if "_aws" in rec and name in rec]


def now_ms(stack):
    return stack.deps.clock.now_ms()


# -- never early -------------------------------------------------------------------------


def test_message_visible_early_waits_until_the_exact_ms(stack, frozen, logs):
    due = T0_MS + 5_700
    sk = schedule(stack, due, "early")
    enqueue(stack, sk, due, delay_seconds=5)  # visible 700 ms before due (SQS may be ~1 s early)
    frozen.tick(5.0)
    event = receive_event(stack)
    assert len(event["Records"]) == 1 and now_ms(stack) == due - 700

    assert run_consumer(stack, event) == {"batchItemFailures": []}

    [ev] = delivered(stack)
    assert ev["delivered_at_ms"] >= due and ev["lateness_ms"] == ev["delivered_at_ms"] - due == 0
    assert now_ms(stack) >= due  # the consumer slept through the clock
    assert stack.rows() == []
    [line] = [r for r in logs() if r.get("message") == "delivered"]
    assert line["lateness_ms"] == [0] and line["keys"] == [sk] and line["pk"] == "scheduler"
    assert event_id(line["pk"], line["keys"][0]) == ev["event_id"]
    assert "payload" not in line and "payloads" not in line
    assert metric_values(logs(), "LatenessMs") == [[0]]
    assert metric_values(logs(), "Delivered") == [1]


def test_far_early_message_is_put_back_until_due(stack, frozen, logs):
    due = T0_MS + 10_400
    sk = schedule(stack, due, "far")
    enqueue(stack, sk, due, delay_seconds=0)
    event = receive_event(stack)
    mid = event["Records"][0]["messageId"]

    assert run_consumer(stack, event) == {"batchItemFailures": [{"itemIdentifier": mid}]}
    assert delivered(stack) == []
    assert len(stack.rows()) == 1
    assert now_ms(stack) == T0_MS  # no in-process wait for a far message
    # back a fraction of a second before due, inside the in-process wait band
    assert any(r.get("message") == "put back" and r["visibility_seconds"] == 10 for r in logs())

    frozen.tick(9.9)
    assert receive_event(stack)["Records"] == []  # hidden
    frozen.tick(0.2)
    event = receive_event(stack)
    assert [r["messageId"] for r in event["Records"]] == [mid]
    assert now_ms(stack) < due
    assert run_consumer(stack, event) == {"batchItemFailures": []}
    [ev] = delivered(stack)
    assert ev["delivered_at_ms"] == due  # waited to the exact ms
    assert ev["attempt"] == 2  # ApproximateReceiveCount
    assert stack.rows() == []


def test_batch_sorted_by_due_waits_progressively(stack, frozen):
    dues = [T0_MS + d for d in (1_900, 300, 1_205, 700, 1_200, 0)]
    for i, due in enumerate(dues):
        enqueue(stack, schedule(stack, due, f"t{i}"), due, delay_seconds=0)
    faults = Faults(stack.sqs, stack.ddb)
    event = receive_event(stack)
    assert len(event["Records"]) == 6

    assert run_consumer(stack, event) == {"batchItemFailures": []}

    events = delivered(stack)
    assert sorted(e["due_ms"] for e in events) == sorted(dues)
    assert all(e["delivered_at_ms"] >= e["due_ms"] for e in events)
    assert max(e["lateness_ms"] for e in events) <= 5
    # 1200 and 1205 share one wait and one SendMessageBatch; the others go as they fall due.
    assert faults.count("SendMessageBatch") == 5
    # a fence per due second (0, 300 and 700 share one; 1200, 1205 and 1900 the next), a consistent
    # Query per run, and the run's conditional deletes before the next wait: a DeleteItem a row
    # (1 write unit; a transaction's delete costs 2)
    assert (faults.count("UpdateItem"), faults.count("Query"), faults.count("TransactWriteItems")) == (2, 5, 0)
    assert faults.count("DeleteItem") == 6 and faults.count("GetItem") == 0
    assert now_ms(stack) == T0_MS + 1_900


def test_due_messages_of_a_batch_go_in_one_send_with_one_fence_one_query_and_a_delete_a_row(stack, frozen, logs):
    for i in range(10):
        due = T0_MS - 1_000 + i  # all past due when received
        enqueue(stack, schedule(stack, due, f"n{i}"), due, delay_seconds=0)
    faults = Faults(stack.sqs, stack.ddb)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert faults.count("SendMessageBatch") == 1
    # the run: one fence of its due second (UpdateItem), one consistent Query of its rows (no read a
    # row), and after the send a conditional DeleteItem a row (1 write unit each, where a transaction's
    # delete costs 2: the CPU of ten calls is cheaper than ten write units)
    assert (faults.count("UpdateItem"), faults.count("Query"), faults.count("TransactWriteItems")) == (1, 1, 0)
    assert faults.count("DeleteItem") == 10
    assert faults.count("GetItem") == faults.count("BatchWriteItem") == 0
    events = delivered(stack)
    assert len(events) == 10
    [lateness] = metric_values(logs(), "LatenessMs")
    assert sorted(lateness) == list(range(991, 1001))
    # one "delivered" line names the run's ten keys with their lateness, and one EMF record
    # carries the invocation's metrics (log bytes per batch, not per event)
    [line] = [r for r in logs() if r.get("message") == "delivered"]
    assert line["count"] == 10 and sorted(line["lateness_ms"]) == list(range(991, 1001))
    assert sorted(line["keys"]) == sorted(e["key"] for e in events)
    [record] = [r for r in logs() if "_aws" in r]
    assert record["Delivered"] == 10 and record["Dropped"] == 0


def test_past_due_row_is_delivered_at_once_with_its_lateness(stack, frozen):
    due = T0_MS - 3_600_000
    enqueue(stack, schedule(stack, due, "late"), due, delay_seconds=0)
    run_consumer(stack)
    [ev] = delivered(stack)
    assert ev["lateness_ms"] == 3_600_000 and ev["delivered_at_ms"] == T0_MS


# -- cancellation and payload --------------------------------------------------------------


def test_cancelled_row_is_dropped(stack, frozen, logs):
    due = T0_MS + 2_000
    sk = schedule(stack, due, "gone")
    enqueue(stack, sk, due, delay_seconds=2)
    stack.ddb.delete_item(TableName=stack.settings.table_name,
                          Key={"pk": {"S": "scheduler"}, "sk": {"S": sk}})
    frozen.tick(2.0)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert delivered(stack) == []
    assert any(r.get("message") == "dropped" and r["sk"] == sk for r in logs())
    assert metric_values(logs(), "Dropped") == [1]
    assert receive_event(stack)["Records"] == []  # acked, not retried


def test_rescheduled_row_old_pointer_is_dropped(stack, frozen):
    old_due, new_due = T0_MS + 1_000, T0_MS + 60_000
    old = schedule(stack, old_due, "job")
    enqueue(stack, old, old_due, delay_seconds=1)
    # reschedule: delete old sk, insert the new one
    stack.ddb.delete_item(TableName=stack.settings.table_name, Key={"pk": {"S": "scheduler"}, "sk": {"S": old}})
    new = schedule(stack, new_due, "job")
    frozen.tick(1.0)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert delivered(stack) == []
    assert [r["sk"]["S"] for r in stack.rows()] == [new]


def test_payload_is_read_at_delivery_time_as_plain_json(stack, frozen):
    due = T0_MS + 1_000
    sk = schedule(stack, due, "p1", {"v": "old"})
    enqueue(stack, sk, due, delay_seconds=1)
    set_payload(stack, sk, {"M": {"v": {"S": "new"}, "n": {"N": "42"}, "f": {"N": "1.5"}, "ok": {"BOOL": True},
                                  "none": {"NULL": True}, "list": {"L": [{"S": "a"}, {"N": "2"}]},
                                  "map": {"M": {"x": {"S": "y"}}}}})
    frozen.tick(1.0)
    run_consumer(stack)
    [ev] = delivered(stack)
    assert ev["payload"] == {"v": "new", "n": 42, "f": 1.5, "ok": True, "none": None, "list": ["a", 2],
                             "map": {"x": "y"}}
    assert EVENT_FIELDS <= set(ev)
    assert ev["id"] == "p1" and ev["key"] == sk and ev["due_ms"] == due
    assert ev["due"] == "2027-01-01T00:00:01.000Z" and ev["delivered_at"] == "2027-01-01T00:00:01.000Z"
    assert ev["publicationTimestamp"] == due and ev["attempt"] == 1
    assert ev["event_id"] == event_id("scheduler", sk)


def test_row_made_invalid_after_enqueue_is_rejected_not_delivered(stack, frozen):
    due = T0_MS + 1_000
    sk = schedule(stack, due, "bad")
    enqueue(stack, sk, due, delay_seconds=1)
    set_payload(stack, sk, {"S": "not a map"})
    frozen.tick(1.0)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert delivered(stack) == []
    [rejection] = stack.bodies(stack.settings.rejected_queue_url)
    assert rejection["code"] == "payload_not_map" and rejection["sk"] == sk and rejection["source"] == "consumer"
    assert stack.rows() == []


def test_payload_logged_only_when_enabled(stack, frozen, logs):
    stack.deps.settings = dataclasses.replace(stack.deps.settings, log_payloads=True)
    enqueue(stack, schedule(stack, T0_MS, "lp", {"secret": "s"}), T0_MS, delay_seconds=0)
    run_consumer(stack)
    [line] = [r for r in logs() if r.get("message") == "delivered"]
    assert line["payload"] == {"secret": "s"}


def test_two_pointers_to_one_row_in_a_batch_deliver_once(stack, frozen):
    sk = schedule(stack, T0_MS, "dup")
    enqueue(stack, sk, T0_MS, delay_seconds=0)
    enqueue(stack, sk, T0_MS, delay_seconds=0, attempt=2)  # an orphan resend
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert len(delivered(stack)) == 1
    assert receive_event(stack)["Records"] == []


# -- poison and partial batches ----------------------------------------------------------------


POISON = [
    "not json",
    "[1, 2]",
    json.dumps({"pk": "scheduler", "sk": "1798761600000#x"}),  # missing fields
    json.dumps({"pk": "scheduler", "sk": "1798761600000#x", "due_ms": "1798761600000", "enqueued_ms": 1}),
    json.dumps({"pk": "other", "sk": "1798761600000#x", "due_ms": 1798761600000, "enqueued_ms": 1}),
    json.dumps({"pk": "__punctual__", "sk": "rule", "due_ms": 0, "enqueued_ms": 1}),
    json.dumps({"pk": "scheduler", "sk": "17987616#x", "due_ms": 17987616, "enqueued_ms": 1}),
    json.dumps({"pk": "scheduler", "sk": "1798761600000#x", "due_ms": 1798761600001, "enqueued_ms": 1}),
]


@pytest.mark.parametrize("body", POISON)
def test_poison_message_fails_alone(stack, frozen, logs, body):
    due = T0_MS - 10
    sks = [schedule(stack, due, f"ok{i}") for i in range(2)]
    enqueue(stack, sks[0], due, delay_seconds=0)
    stack.sqs.send_message(QueueUrl=stack.settings.delay_queue_url, MessageBody=body)
    enqueue(stack, sks[1], due, delay_seconds=0)
    event = receive_event(stack)
    poison = [r["messageId"] for r in event["Records"] if r["body"] == body]

    assert run_consumer(stack, event) == {"batchItemFailures": [{"itemIdentifier": poison[0]}]}
    assert sorted(e["key"] for e in delivered(stack)) == sks
    assert any(r.get("message") == "poison message" and r["message_id"] == poison[0] for r in logs())


def test_poison_message_ends_in_the_dlq_after_max_receives(stack, frozen):
    stack.sqs.send_message(QueueUrl=stack.settings.delay_queue_url, MessageBody="garbage")
    receives = 0
    for _ in range(20):
        event = receive_event(stack)
        if not event["Records"]:
            break
        receives += 1
        assert run_consumer(stack, event)["batchItemFailures"]
        frozen.tick(VISIBILITY_TIMEOUT_S + 1)
    assert receives == 10  # maxReceiveCount of the delay queue
    [dead] = stack.drain(stack.delay_dlq_url)
    assert dead["Body"] == "garbage"


# -- crash injection and failures ------------------------------------------------------------------


def _redeliver(stack, frozen):
    frozen.tick(VISIBILITY_TIMEOUT_S + 1)
    event = receive_event(stack)
    assert len(event["Records"]) == 1
    return run_consumer(stack, event)


def test_crash_after_send_before_delete_duplicates_with_same_event_id(stack, frozen):
    sk = schedule(stack, T0_MS, "c1")
    enqueue(stack, sk, T0_MS, delay_seconds=0)
    faults = Faults(stack.sqs, stack.ddb).crash_after("SendMessageBatch")
    with pytest.raises(InjectedCrash):
        run_consumer(stack)
    first = delivered(stack)
    assert len(first) == 1 and len(stack.rows()) == 1
    faults.clear()

    assert _redeliver(stack, frozen) == {"batchItemFailures": []}
    [second] = delivered(stack)
    assert second["event_id"] == first[0]["event_id"] == event_id("scheduler", sk)
    assert (first[0]["attempt"], second["attempt"]) == (1, 2)
    assert stack.rows() == []


@pytest.mark.parametrize("crash", [("before", "UpdateItem"), ("after", "UpdateItem"),
                                   ("before", "SendMessageBatch")])
def test_crash_before_delivery_delivers_once_later(stack, frozen, crash):
    when, op = crash
    sk = schedule(stack, T0_MS, "c2")
    enqueue(stack, sk, T0_MS, delay_seconds=0)
    faults = Faults(stack.sqs, stack.ddb)
    getattr(faults, f"crash_{when}")(op)
    with pytest.raises(InjectedCrash):
        run_consumer(stack)
    assert delivered(stack) == [] and len(stack.rows()) == 1
    faults.clear()

    assert _redeliver(stack, frozen) == {"batchItemFailures": []}
    [ev] = delivered(stack)
    assert ev["key"] == sk and ev["attempt"] == 2
    assert stack.rows() == []


def test_crash_after_delete_before_ack_is_dropped_on_redelivery(stack, frozen):
    sk = schedule(stack, T0_MS, "c3")
    enqueue(stack, sk, T0_MS, delay_seconds=0)
    faults = Faults(stack.sqs, stack.ddb).crash_after("DeleteItem")
    with pytest.raises(InjectedCrash):
        run_consumer(stack)
    faults.clear()
    assert len(delivered(stack)) == 1 and stack.rows() == []
    assert _redeliver(stack, frozen) == {"batchItemFailures": []}
    assert delivered(stack) == []


@pytest.mark.parametrize("code,times", [("InternalError", 6), ("AccessDenied", 1)])
def test_a_failed_delivery_send_is_retried_by_a_copy_of_its_pointer_20_s_later(stack, frozen, code, times):
    """SQS failing the delivery send: the record is not failed (SQS would redeliver it after the
    180 s visibility timeout and, after 10 receives, send it to the DLQ); the row's orphan clock is
    restarted (its send mark set to now) and a copy of its pointer, of the same attempt and carrying
    that send mark, goes back to the delay queue 20 s later (issue 28)."""
    sk = schedule(stack, T0_MS, "f1")
    enqueue(stack, sk, T0_MS, delay_seconds=0)
    faults = Faults(stack.sqs, stack.ddb).fail("SendMessageBatch", code, times=times)
    sent = capture_sends(stack)
    assert run_consumer(stack) == {"batchItemFailures": []}
    faults.clear()
    assert delivered(stack) == []
    [row] = stack.rows()
    assert row[ATTR_ENQUEUED_MS] == {"N": str(now_ms(stack))}
    [(body, delay)] = [(json.loads(e["MessageBody"]), e["DelaySeconds"]) for e in sent
                       if e["QueueUrl"] == stack.settings.delay_queue_url]
    assert (body["sk"], body["attempt"], body["enqueued_ms"], delay) == (sk, 1, now_ms(stack), 20)
    frozen.tick(20)
    assert run_consumer(stack) == {"batchItemFailures": []}
    [ev] = delivered(stack)
    assert ev["key"] == sk and ev["delivered_at_ms"] == now_ms(stack) and stack.rows() == []
    assert 20_000 <= ev["lateness_ms"] < 25_000  # the copy's 20 s, after the first send's retries


def test_an_event_sqs_refuses_for_its_content_is_rejected_as_undeliverable(stack, frozen):
    sk = schedule(stack, T0_MS, "bad-bytes")
    enqueue(stack, sk, T0_MS, delay_seconds=0)
    stack.deps.sqs = PartialFailSqs(stack.sqs, {sk}, sender_fault=True, times=1, field="key")
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert delivered(stack) == [] and stack.rows() == []
    [rejection] = stack.bodies(stack.settings.rejected_queue_url)
    assert (rejection["code"], rejection["sk"], rejection["source"]) == ("undeliverable", sk, "consumer")
    assert "refused its event" in rejection["reason"]


def test_throttled_delivery_send_is_retried_in_the_invocation(stack, frozen):
    enqueue(stack, schedule(stack, T0_MS, "th"), T0_MS, delay_seconds=0)
    Faults(stack.sqs, stack.ddb).throttle("SendMessageBatch", times=2)
    assert run_consumer(stack) == {"batchItemFailures": []}
    [ev] = delivered(stack)
    assert ev["delivered_at_ms"] >= ev["due_ms"]


def test_a_failed_fence_sends_nothing_and_is_retried_later(stack, frozen):
    sk = schedule(stack, T0_MS, "r1")
    enqueue(stack, sk, T0_MS, delay_seconds=0)
    faults = Faults(stack.sqs, stack.ddb).fail("UpdateItem", "AccessDeniedException")
    assert run_consumer(stack) == {"batchItemFailures": []}
    faults.clear()
    assert delivered(stack) == [] and len(stack.rows()) == 1
    frozen.tick(20)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert [e["key"] for e in delivered(stack)] == [sk]


def test_a_failed_delete_is_retried_for_the_delete_alone_without_a_second_delivery(stack, frozen):
    """The delete refused after the event went out: a copy of the pointer marked delete_only comes
    back 20 s later and deletes the row; no duplicate, however long the delete fails (issue 28:
    it was one duplicate per redelivery of the message)."""
    sk = schedule(stack, T0_MS, "d1")
    enqueue(stack, sk, T0_MS, delay_seconds=0)
    faults = Faults(stack.sqs, stack.ddb).fail("DeleteItem", "AccessDeniedException", times=7 * 3)
    sent = capture_sends(stack)
    assert run_consumer(stack) == {"batchItemFailures": []}
    [first] = delivered(stack)
    # the copy names the DelaySeconds it was sent with, as every pointer (its pick-up counts from them)
    [copy] = [m for m in sent if m["QueueUrl"] == stack.settings.delay_queue_url]
    assert (copy["DelaySeconds"], json.loads(copy["MessageBody"])["delay_seconds"]) == (20, 20)
    for _ in range(3):  # the delete keeps failing: the copy goes round, nothing is sent again
        frozen.tick(20)
        assert run_consumer(stack) == {"batchItemFailures": []}
        assert delivered(stack) == [] and len(stack.rows()) == 1
    faults.clear()
    frozen.tick(20)
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert delivered(stack) == [] and stack.rows() == []
    assert first["key"] == sk


def test_failed_put_back_still_fails_the_item_and_never_delivers_early(stack, frozen):
    due = T0_MS + 30_000
    enqueue(stack, schedule(stack, due, "pb"), due, delay_seconds=0)
    Faults(stack.sqs, stack.ddb).fail("ChangeMessageVisibility", "AccessDenied")
    assert len(run_consumer(stack)["batchItemFailures"]) == 1
    assert delivered(stack) == []


def test_unexpected_error_fails_only_its_group(stack, frozen, monkeypatch):
    import punctual.core.usecases.deliver as h

    enqueue(stack, schedule(stack, T0_MS, "boom"), T0_MS, delay_seconds=0)
    enqueue(stack, schedule(stack, T0_MS + 1_000, "fine"), T0_MS + 1_000, delay_seconds=0)
    real = h.task_from_item

    def flaky(item, partition, event_format="punctual"):
        if item["sk"]["S"].endswith("#boom"):
            raise KeyError("bug")
        return real(item, partition, event_format)

    monkeypatch.setattr(h, "task_from_item", flaky)
    event = receive_event(stack)
    boom = [r["messageId"] for r in event["Records"] if "boom" in r["body"]]
    assert run_consumer(stack, event) == {"batchItemFailures": [{"itemIdentifier": boom[0]}]}
    assert [e["id"] for e in delivered(stack)] == ["fine"]
    assert [r["sk"]["S"].split("#")[1] for r in stack.rows()] == ["boom"]


# -- clock stepping back, entry point -------------------------------------------------------------


class SteppingBackClock:
    """Wraps the test clock; the Nth reading is 400 ms behind (an NTP step)."""

    def __init__(self, inner, nth):
        self.inner, self.nth, self.reads = inner, nth, 0

    def now_ms(self):
        self.reads += 1
        return self.inner.now_ms() - (400 if self.reads == self.nth else 0)

    def sleep_ms(self, ms):
        self.inner.sleep_ms(ms)


def test_clock_re_checked_right_before_sending(stack, frozen):
    due = T0_MS
    enqueue(stack, schedule(stack, due, "ntp"), due, delay_seconds=0)
    frozen.tick(0.1)
    # reads: 1 plan, 2 next_group, 3 sleep_until, 4 re-check before send (stepped back)
    stack.deps.clock = SteppingBackClock(stack.deps.clock, nth=4)
    run_consumer(stack)
    [ev] = delivered(stack)
    assert ev["delivered_at_ms"] >= due


def test_lambda_handler_entry_point(stack, frozen, monkeypatch, logs):
    """GIVEN two invocations through the Lambda entry point WHEN they log THEN every line (logs and
    EMF records) names its invocation's request id, and only the first is a cold start."""
    for name, value in to_environment(stack.settings).items():
        monkeypatch.setenv(name, value)
    obs._invocation.set({})
    reset_default_deps()
    try:
        for n, task_id in enumerate(("h1", "h2")):
            enqueue(stack, schedule(stack, T0_MS - 5, task_id), T0_MS - 5, delay_seconds=0)
            event = receive_event(stack)
            context = SimpleNamespace(function_name="punctual-consumer", aws_request_id=f"req-{n}")
            assert handler(event, context) == {"batchItemFailures": []}
        assert sorted(e["id"] for e in delivered(stack)) == ["h1", "h2"]
        lines = logs()
        by_request = {rid: [rec for rec in lines if rec.get("request_id") == rid] for rid in ("req-0", "req-1")}
        assert all("request_id" in rec for rec in lines)
        assert {rec["cold_start"] for rec in by_request["req-0"]} == {True}
        assert {rec["cold_start"] for rec in by_request["req-1"]} == {False}
        for rid, recs in by_request.items():  # a delivered log line and its lateness metric each
            assert any(rec.get("message") == "delivered" for rec in recs), rid
            assert any("_aws" in rec for rec in recs), rid
    finally:
        reset_default_deps()


@pytest.mark.parametrize("remaining_ms, waits", [(30_000, True), (8_000, False)])
def test_the_consumer_waits_only_as_long_as_its_invocation_can(stack, frozen, monkeypatch, remaining_ms, waits):
    """GIVEN a message due in 1.5 s (inside the 2 s in-process wait) WHEN the Lambda context has
    plenty of time left THEN the handler waits and delivers on the ms; WHEN it has too little for the
    wait, a group's extra wake and span and the sends THEN it puts the message back to its due time
    instead of risking the timeout mid-batch (nothing is delivered early either way)."""
    import functions.consumer.handler as consumer_handler

    monkeypatch.setattr(consumer_handler, "default_deps", lambda *_: stack.deps)  # its clock sleeps in frozen time
    due = T0_MS + 1_500
    enqueue(stack, schedule(stack, due, "budget"), due, delay_seconds=0)
    event = receive_event(stack)
    context = SimpleNamespace(function_name="punctual-consumer", aws_request_id="r",
                              get_remaining_time_in_millis=lambda: remaining_ms)
    response = consumer_handler.handler(event, context)
    if waits:
        assert response == {"batchItemFailures": []}
        assert [e["delivered_at_ms"] for e in delivered(stack)] == [due]
    else:
        assert response == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]}
        assert delivered(stack) == [] and now_ms(stack) == T0_MS  # no wait started
        assert len(stack.rows()) == 1


def test_empty_event_and_queue_url_from_arn(stack, frozen):
    assert consume({"Records": []}, stack.deps) == {"batchItemFailures": []}
    assert consume({}, stack.deps) == {"batchItemFailures": []}
    assert queue_url_from_arn("arn:aws:sqs:eu-west-1:123456789012:q") == \
        "https://sqs.eu-west-1.amazonaws.com/123456789012/q"
    assert queue_url_from_arn("nope") == ""


# -- group messages: many row pointers in one delay-queue message -----------------------

def _group(stack, n, due=T0_MS, step=1, prefix="g"):
    rows = [(schedule(stack, due + i * step, f"{prefix}{i:02}"), due + i * step) for i in range(n)]
    enqueue_group(stack, rows)
    return [sk for sk, _ in rows]


def test_a_group_is_delivered_on_its_rows_due_times_with_batched_sends(stack, frozen):
    # GIVEN one message pointing at 25 rows due over 240 ms
    sks = _group(stack, 25, step=10)
    faults = Faults(stack.sqs, stack.ddb)
    # WHEN the consumer gets it 1 s early
    frozen.tick(-1)
    assert run_consumer(stack) == {"batchItemFailures": []}
    # THEN every row is delivered once, never early, on its ms (runs of rows due within 10 ms
    # share a wait and a SendMessageBatch), and deleted
    events = delivered(stack)
    assert sorted(e["key"] for e in events) == sks
    assert all(0 <= e["lateness_ms"] <= 10 for e in events)
    # one fence of their due second, one Query per run; the 25 deletes at the end (runs 10 ms apart
    # leave no wait long enough to delete in: DELETE_WHILE_WAITING_MS), a DeleteItem each
    assert faults.count("SendMessageBatch") >= 10 and faults.count("UpdateItem") == 1
    assert faults.count("Query") == faults.count("SendMessageBatch") and faults.count("TransactWriteItems") == 0
    assert faults.count("DeleteItem") == 25
    assert stack.rows() == []


def test_a_group_whose_rows_were_claimed_at_different_ms_is_deleted_whole_and_delivered_once(stack, frozen):
    """A poll claims a group's rows one after the other (here a claim takes 1 ms); the message
    carries the latest claim's time, so each row but the last holds an earlier send mark. The
    delete's condition (the row's mark no later than the message's) takes them all out, and the
    poll after the orphan grace finds nothing to send again. Kills issue 42's item 19 mutant: the
    conditional delete requiring the very mark (``=`` for ``<=``: the rows claimed first left as
    "written over", then sent again by the orphan check: a duplicate each)."""
    from punctual.core.usecases.poll import poll

    stack.settings = stack.deps.settings = dataclasses.replace(stack.settings, send_workers=1)
    sks = [schedule(stack, T0_MS + 10_000, f"g{i}") for i in range(3)]
    stack.ddb.meta.events.register("after-call.dynamodb.UpdateItem", lambda **_: frozen.tick(0.001))
    assert poll(stack.deps).sent == 3
    marks = [int(row[ATTR_ENQUEUED_MS]["N"]) for row in stack.rows()]
    assert marks == [marks[0], marks[0] + 1, marks[0] + 2]  # claimed at three different ms
    frozen.tick(10)
    event = receive_event(stack)
    (record,) = event["Records"]  # one message for the three rows, with the latest claim's time
    assert json.loads(record["body"])["enqueued_ms"] == marks[2]
    assert run_consumer(stack, event) == {"batchItemFailures": []}
    assert sorted(e["key"] for e in delivered(stack)) == sks
    assert stack.rows() == []  # every row taken out
    frozen.tick(stack.settings.orphan_grace_ms / 1000)
    assert poll(stack.deps).sent == 0 and delivered(stack) == []

def test_deletes_in_a_wait_never_hold_back_the_next_run(stack, frozen):
    """Each DeleteItem takes 20 ms here: of the first run's ten deletes, those started before the
    second run is 50 ms away (DELETE_WHILE_WAITING_MS) are made in the wait, the rest after the
    second run's send, which goes out on its due time."""
    rows = [(schedule(stack, T0_MS + (0 if i < 10 else 100), f"r{i:02}"), T0_MS + (0 if i < 10 else 100))
            for i in range(20)]
    enqueue_group(stack, rows)
    faults = Faults(stack.sqs, stack.ddb).delay("DeleteItem", 20, stack.deps.clock)
    frozen.tick(-1)
    assert run_consumer(stack) == {"batchItemFailures": []}
    events = delivered(stack)
    assert len(events) == 20 and max(e["lateness_ms"] for e in events) <= 10
    assert faults.count("DeleteItem") == 20 and stack.rows() == []
    # three deletes fit before T0 + 50 ms (0 -> 20 -> 40 -> 60): started at 0, 20 and 40
    assert now_ms(stack) == T0_MS + 100 + 17 * 20


def test_a_cancelled_row_inside_a_group_is_dropped_and_the_others_delivered(stack, frozen, logs):
    sks = _group(stack, 5)
    stack.ddb.delete_item(TableName=stack.settings.table_name,
                          Key={"pk": {"S": "scheduler"}, "sk": {"S": sks[2]}})  # cancelled after enqueue
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert sorted(e["key"] for e in delivered(stack)) == [sk for i, sk in enumerate(sks) if i != 2]
    assert [r["sk"] for r in logs() if r.get("message") == "dropped"] == [sks[2]]


def test_a_poison_pointer_inside_a_group_fails_the_record_and_the_rest_is_delivered_once(stack, frozen, logs):
    # GIVEN a group whose second pointer is not a row key
    good = [schedule(stack, T0_MS + i, f"p{i}") for i in range(3)]
    for sk in good:
        mark_claimed(stack, sk, 1, T0_MS)
    body = json.dumps({"pk": "scheduler", "due_ms": T0_MS, "enqueued_ms": T0_MS,
                       "rows": [[good[0], 1], ["2027-01-01T00:00:00Z#iso", 1], [good[1], 1], [good[2], 1]]})
    stack.sqs.send_message(QueueUrl=stack.settings.delay_queue_url, MessageBody=body)
    event = receive_event(stack)
    mid = event["Records"][0]["messageId"]
    # THEN the valid rows are delivered, the record fails (the DLQ keeps it after its retries)
    assert run_consumer(stack, event) == {"batchItemFailures": [{"itemIdentifier": mid}]}
    assert sorted(e["key"] for e in delivered(stack)) == good
    assert any(r.get("message") == "poison message" and "1 of 4" in r["reason"] for r in logs())
    # and a redelivery drops the delivered rows (deleted) instead of sending them again
    assert _redeliver(stack, frozen) == {"batchItemFailures": [{"itemIdentifier": mid}]}
    assert delivered(stack) == []


def test_a_failed_send_inside_a_group_retries_only_its_rows(stack, frozen):
    # GIVEN 15 rows due together: two SendMessageBatch calls, the second fails for good
    sks = _group(stack, 15, step=0)
    faults = Faults(stack.sqs, stack.ddb).fail("SendMessageBatch", "AccessDenied", first=2)
    assert run_consumer(stack) == {"batchItemFailures": []}
    first = delivered(stack)
    assert len(first) == 10 and len(stack.rows()) == 5  # the delivered ten are deleted
    faults.clear()
    # WHEN the copy of the five rows' pointers comes back 20 s later: only those five go
    frozen.tick(20)
    assert run_consumer(stack) == {"batchItemFailures": []}
    second = delivered(stack)
    assert sorted(e["key"] for e in first + second) == sks and len(second) == 5
    assert stack.rows() == []


def test_a_crash_between_a_groups_sends_loses_nothing_and_duplicates_keep_their_event_id(stack, frozen):
    sks = _group(stack, 15, step=0)
    faults = Faults(stack.sqs, stack.ddb).crash_after("SendMessageBatch", nth=1)
    with pytest.raises(InjectedCrash):
        run_consumer(stack)
    faults.clear()
    first = delivered(stack)
    assert len(first) >= 10 and len(stack.rows()) == 15  # sent (the other call runs in parallel), not deleted
    assert _redeliver(stack, frozen) == {"batchItemFailures": []}
    again = delivered(stack)
    assert sorted(e["key"] for e in again) == sks  # every row, the sent ones a second time...
    ids = {e["key"]: e["event_id"] for e in again}
    assert all(ids[e["key"]] == e["event_id"] for e in first)  # ...with the same event_id
    assert stack.rows() == []


def test_rows_due_together_beyond_one_invocations_share_are_handed_to_another_invocation(stack, frozen, logs):
    """consumer_rules.hand_off: a batch of group messages holding more rows than consumer_max_rows
    is spread over invocations: the messages beyond the share are made visible again at once and
    left undeleted; the next invocation delivers them. Every row once, never early."""
    stack.deps.settings = dataclasses.replace(stack.deps.settings, consumer_max_rows=4)
    first, second, third = (_group(stack, 3, due=T0_MS + 10 * k, prefix=f"g{k}") for k in range(3))
    frozen.tick(-1)  # received a second before the first row is due
    event = receive_event(stack)
    ids = {json.loads(r["body"])["rows"][0][0]: r["messageId"] for r in event["Records"]}
    assert len(event["Records"]) == 3
    resp = run_consumer(stack, event)
    # THEN the first message (3 rows) is delivered; the two others (3 + 3 > 4) are handed off
    assert sorted(f["itemIdentifier"] for f in resp["batchItemFailures"]) == sorted(
        [ids[second[0]], ids[third[0]]])
    assert sorted(e["key"] for e in delivered(stack)) == first
    assert metric_values(logs(), "PutBack") == []  # a hand-off is not a put-back
    assert [rec["message_id"] for rec in logs() if rec.get("message") == "handed off"] == [ids[second[0]], ids[third[0]]]
    # AND they are visible again at once, for another invocation, which delivers them
    again = receive_event(stack)
    assert sorted(r["messageId"] for r in again["Records"]) == sorted([ids[second[0]], ids[third[0]]])
    assert all(r["attributes"]["ApproximateReceiveCount"] == "2" for r in again["Records"])
    assert run_consumer(stack, again) == {"batchItemFailures": [{"itemIdentifier": ids[third[0]]}]}
    assert run_consumer(stack) == {"batchItemFailures": []}
    events = delivered(stack)
    assert sorted(e["key"] for e in events) == second + third
    assert all(e["lateness_ms"] >= 0 for e in events)
    assert stack.rows() == [] and receive_event(stack)["Records"] == []
