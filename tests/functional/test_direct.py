"""Direct delivery (Settings.delivery = "direct", docs/architecture.md "Direct delivery") against
moto, in virtual time: the poller and the editor send each task's delivered event to the delivery
queue themselves, at the moment that makes whole seconds of DelaySeconds land it on its due ms; the
rows sent are taken out; a cancel or reschedule that comes after the claim answers AlreadyEnqueued.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from punctual.client import PunctualClient
from punctual.core.config import Settings
from punctual.core.models import ATTR_DIRECT, ATTR_ENQUEUED_MS, event_id
from punctual.core.usecases.ensure_poll import NoPollRequests, request_poll
from punctual.core.usecases.poll import poll
from punctual.core.usecases.process_stream import process_stream
from punctual.errors import AlreadyEnqueued, NotFound
from tests.faults import Faults, InjectedCrash, PartialFailSqs
from tests.functional.helpers import before_handler_call, row_map, sk, user
from tests.support import T0_MS, StreamReader, client

STEP = 100


@pytest.fixture
def direct(stack):
    # direct_max_wait_ms 1,000: every phase waited for; no early margin (the defaults, and the margin,
    # are pinned on their own below)
    stack.settings = stack.deps.settings = dataclasses.replace(stack.settings, delivery="direct", align_step_ms=STEP,
                                                               direct_max_wait_ms=1000, direct_early_margin_ms=0)
    return stack


def sends(stack) -> list[tuple[int, str, int, dict[str, Any]]]:
    """(virtual time of the call, queue url, DelaySeconds, body) of every entry sent from now on."""
    out: list[tuple[int, str, int, dict[str, Any]]] = []

    def capture(params, **_):
        now = stack.deps.clock.now_ms()
        out.extend((now, params["QueueUrl"], e["DelaySeconds"], json.loads(e["MessageBody"])) for e in params["Entries"])

    stack.sqs.meta.events.register("provide-client-params.sqs.SendMessageBatch", capture)
    return out


def test_a_direct_poll_sends_each_event_to_the_delivery_queue_visible_on_its_due_ms(direct):
    """GIVEN rows due 5 s ago, in 250 ms, in 100.25 s, 100.7 s, 200.05 s and 300.999 s
    WHEN a poll runs at T0 in direct delivery (align_step_ms 100)
    THEN each event goes to the delivery queue (nothing to the delay queue) at its phase: the moment
    in the next second a whole number of seconds before its due ms (the due ms itself when under a
    second away, at once when past); phases within 100 ms share a send made at the last of them; so
    each becomes visible at its due ms or at most 100 ms after, never before; the rows are taken out.
    Mutants: DelaySeconds floored (e visible 950 ms early), no wait for the phases (up to 999 ms late)."""
    sent = sends(direct)
    offsets = {"past": -5_000, "soon": 250, "a": 100_250, "b": 100_700, "c": 200_050, "d": 300_999, "e": 150_200}
    for name, off in offsets.items():
        direct.put_raw(sk(off, name), {"n": name})

    report = poll(direct.deps, token="inv-1")

    assert (report.sent, report.failed) == (7, 0)
    assert {url for _, url, _, _ in sent} == {direct.settings.delivery_queue_url}
    by_row = {body["id"]: (at - T0_MS, delay) for at, _, delay, body in sent}
    # phases: past 0 (now), c 50, e 200, a 250, soon 250 (its due ms), b 700, d 999;
    # past shares c's send at 50; e, a and soon share the send at 250 (e 50 ms after its phase: still
    # 150 s of delay, rounded up, so visible 50 ms after its due ms)
    assert by_row == {"past": (50, 0), "c": (50, 200), "e": (250, 150), "a": (250, 100), "soon": (250, 0),
                      "b": (700, 100), "d": (999, 300)}
    for at, _, delay, body in sent:
        visible = at + delay * 1000
        due = T0_MS + offsets[body["id"]]
        assert visible >= due  # never early
        if body["id"] != "past":
            assert visible - due < STEP
        assert body["delivered_at_ms"] == visible
        assert body["lateness_ms"] == visible - due
    assert direct.rows() == []  # taken out after their send
    assert direct.drain(direct.settings.delay_queue_url) == []


def test_a_direct_event_carries_the_delivered_event_fields(direct):
    sent = sends(direct)
    key = sk(30_000, "job-1")
    direct.put_raw(key, {"order": "42"})
    poll(direct.deps)
    ((at, _, delay, body),) = sent
    assert body == {
        "event_id": event_id(direct.settings.partition_key_value, key),
        "id": "job-1",
        "key": key,
        "due": "2027-01-01T00:00:30.000Z",
        "due_ms": T0_MS + 30_000,
        "payload": {"order": "42"},
        "delivered_at": "2027-01-01T00:00:30.000Z",
        "delivered_at_ms": T0_MS + 30_000,
        "lateness_ms": 0,
        "attempt": 1,
        "publicationTimestamp": T0_MS + 30_000,
    }
    assert (at, delay) == (T0_MS, 30)


def test_the_event_becomes_visible_on_the_delivery_queue_at_its_due_second(direct, frozen):
    key = sk(7_000, "v")
    direct.put_raw(key, {"n": "v"})
    poll(direct.deps)
    frozen.tick(6.9)
    assert direct.drain(direct.settings.delivery_queue_url) == []  # not before its due ms
    frozen.tick(0.2)
    assert [json.loads(m["Body"])["key"] for m in direct.drain(direct.settings.delivery_queue_url)] == [key]


def test_a_direct_events_sent_timestamp_precedes_its_due_time_by_design(direct, frozen):
    """README, "Direct delivery": SQS's SentTimestamp is the send, DelaySeconds before the due time; the
    event is received, and says it was delivered, at its due time. A consumer checking SentTimestamp
    against due_ms would call it early."""
    key = sk(7_000, "v")
    direct.put_raw(key, {"n": "v"})
    poll(direct.deps)
    frozen.tick(7.0)
    (message,) = direct.drain(direct.settings.delivery_queue_url)
    event = json.loads(message["Body"])
    assert int(message["Attributes"]["SentTimestamp"]) == T0_MS == event["due_ms"] - 7_000
    assert event["delivered_at_ms"] == event["due_ms"] == T0_MS + 7_000


def test_a_cancel_before_the_poll_stops_the_task(direct):
    sent = sends(direct)
    key = sk(60_000, "c")
    direct.put_raw(key, {"n": "c"})
    assert user(direct).cancel(key).key == key
    assert poll(direct.deps).sent == 0
    assert sent == []


@pytest.mark.parametrize("action", ["cancel", "reschedule"])
def test_a_cancel_after_the_claim_answers_already_enqueued_and_the_task_goes_out(direct, action):
    """GIVEN a poll that has claimed a row (its claim marks it as sent, direct delivery)
    WHEN the user cancels or reschedules it before the poll's send
    THEN the user gets AlreadyEnqueued, nothing changes, and the event goes out once.
    Mutant: a cancel not conditioned on the direct mark (it returns while the task goes out)."""
    sent = sends(direct)
    key = sk(60_000, "r")
    direct.put_raw(key, {"n": "r"})
    u = user(direct)
    act = (lambda: u.cancel(key)) if action == "cancel" else (lambda: u.reschedule(key, T0_MS + 120_000))
    out = before_handler_call(direct, "SendMessageBatch", act)

    assert poll(direct.deps).sent == 1

    assert isinstance(out.get("error"), AlreadyEnqueued), out
    assert [body["key"] for _, _, _, body in sent] == [key]
    assert direct.rows() == []  # taken out after the send; no rescheduled copy was made


def test_a_cancel_racing_the_claim_wins_when_it_lands_first(direct):
    """The user's delete lands between the poll's read and its claim: the claim fails (the row is
    gone), nothing is sent, the cancel returned the task."""
    sent = sends(direct)
    key = sk(60_000, "w")
    direct.put_raw(key, {"n": "w"})
    out: dict[str, Any] = {}
    u = user(direct)

    def hook(params, **_):
        if params.get("Key", {}).get("sk", {}).get("S") == key and "ran" not in out:
            out["ran"] = True
            out["result"] = u.cancel(key)

    direct.ddb.meta.events.register("provide-client-params.dynamodb.UpdateItem", hook)
    report = poll(direct.deps)
    assert out["result"].key == key
    assert (report.sent, report.skipped) == (0, 1)
    assert sent == []


def test_an_sqs_brownout_releases_the_claim_and_the_task_is_cancellable_again(direct):
    """SQS fails the send through all its retries: the claim is released with its attempt taken
    back and its direct mark removed, so the row waits for a poll, and a cancel now succeeds."""
    key = sk(60_000, "b")
    direct.put_raw(key, {"n": "b"})
    direct.deps.sqs = PartialFailSqs(direct.sqs, {key}, sender_fault=False, times=6, field="key")
    report = poll(direct.deps)
    assert (report.sent, report.failed) == (0, 1)
    row = row_map(direct)[key]
    assert ATTR_ENQUEUED_MS not in row and ATTR_DIRECT not in row
    assert row["punctual_attempt"] == {"N": "0"}
    assert user(direct).cancel(key).key == key


def test_a_poll_crashing_between_send_and_take_out_resends_once_on_retry(direct, frozen):
    """The poll dies after its send, before taking the row out: Lambda's retry (the same token)
    takes its own claim over and sends again: one duplicate after a crash, the same event id, the
    same attempt (invariant 5); the row is then taken out."""
    sent = sends(direct)
    key = sk(30_000, "d")
    direct.put_raw(key, {"n": "d"})
    Faults(direct.ddb).crash_before("DeleteItem")
    with pytest.raises(InjectedCrash):
        poll(direct.deps, token="inv-1")
    assert ATTR_DIRECT in row_map(direct)[key]
    frozen.tick(60)
    assert poll(direct.deps, token="inv-1").sent == 1
    bodies = [body for _, _, _, body in sent]
    assert [b["key"] for b in bodies] == [key, key]
    assert len({b["event_id"] for b in bodies}) == 1 and {b["attempt"] for b in bodies} == {1}
    assert direct.rows() == []


def test_a_poll_crashing_between_claim_and_send_is_finished_by_its_retry(direct, frozen):
    sent = sends(direct)
    keys = [sk(30_000 + i * 1000, f"k{i}") for i in range(3)]
    for k in keys:
        direct.put_raw(k, {"k": k})
    Faults(direct.sqs).crash_before("SendMessageBatch")
    with pytest.raises(InjectedCrash):
        poll(direct.deps, token="inv-1")
    assert direct.drain(direct.settings.delivery_queue_url) == []  # the crash came before SQS took anything
    assert all(ATTR_DIRECT in row for row in direct.rows())  # claimed
    del sent[:]
    frozen.tick(60)
    assert poll(direct.deps, token="inv-1").sent == 3
    assert sorted(body["key"] for _, _, _, body in sent) == keys
    assert direct.rows() == []


def test_the_editor_sends_a_row_due_soon_straight_to_the_delivery_queue(direct):
    """A row written 3.5 s before due: the editor claims it and sends its event at the phase
    (500 ms after now), with 3 s of delay: visible on its due ms."""
    reader = StreamReader(direct)
    sent = sends(direct)
    key = sk(3_500, "e")
    direct.put_raw(key, {"n": "e"})
    assert process_stream(reader.event(), direct.deps) == {"batchItemFailures": []}
    ((at, url, delay, body),) = sent
    assert (url, at - T0_MS, delay, body["key"]) == (direct.settings.delivery_queue_url, 500, 3, key)
    assert direct.rows() == []


def test_direct_delivery_asks_for_a_poll_through_the_delay_queue_when_there_is_one(direct):
    """The construct keeps the delay queue and the consumer in direct delivery for poll requests
    (docs/architecture.md, "When arming fails"); without a delay queue the request is a clear error."""
    request_poll(direct.deps, T0_MS + 120_000, "test")
    (body,) = direct.bodies(direct.settings.delay_queue_url)
    assert body["poll_by_ms"] == T0_MS + 120_000
    bare = dataclasses.replace(direct.settings, delay_queue_url="")
    with pytest.raises(NoPollRequests):
        request_poll(dataclasses.replace(direct.deps, settings=bare), None, "test")


def test_a_task_taken_out_after_its_send_is_reported_already_enqueued_to_a_direct_client(direct):
    """After the send the row is taken out: a client told the deployment's delivery and window
    answers AlreadyEnqueued for a key due within the window (NotFound beyond it; AlreadyDelivered
    once due), where a default client answers NotFound. Mutant: _missing ignoring the mode."""
    key = sk(60_000, "gone")
    direct.put_raw(key, {"n": "gone"})
    assert poll(direct.deps).sent == 1 and direct.rows() == []
    told = PunctualClient(direct.settings.table_name, delivery="direct", window_seconds=900, ddb=client("dynamodb"),
                          clock=direct.deps.clock)
    with pytest.raises(AlreadyEnqueued):
        told.cancel(key)
    with pytest.raises(AlreadyEnqueued):
        told.reschedule(key, T0_MS + 600_000)
    far = sk(901_000, "far")
    with pytest.raises(NotFound) as beyond:
        told.cancel(far)
    assert type(beyond.value) is NotFound
    with pytest.raises(NotFound) as default:
        user(direct).cancel(key)
    assert type(default.value) is NotFound


def test_a_direct_send_emits_the_consumers_lateness_and_delivered_metrics(direct):
    """The lateness alarm and the dashboard read LatenessMs and Delivered, which the consumer emits in
    the default mode: in direct delivery the sender emits them, with the lateness each send planned
    (its event's lateness_ms). Mutant: no metrics from the direct path (the alarm never fires)."""
    import io

    from punctual.core import observability as obs
    from punctual.core.metrics_names import DELIVERED, LATENESS_MS
    from tests.unit.test_observability import assert_valid_emf, values_of

    sent = sends(direct)
    for name, off in {"a": 100_250, "e": 150_200, "past": -5_000}.items():
        direct.put_raw(sk(off, name), {"n": name})
    buf = io.StringIO()
    obs.set_stream(buf)
    try:
        poll(direct.deps)
    finally:
        obs.set_stream(None)
    emf = [rec for rec in map(json.loads, buf.getvalue().splitlines()) if "_aws" in rec]
    for rec in emf:
        assert_valid_emf(rec)
    assert sorted(values_of(emf, LATENESS_MS)) == sorted(body["lateness_ms"] for _, _, _, body in sent) == [0, 50, 5_000]
    assert values_of(emf, DELIVERED) == [3]


@pytest.mark.parametrize("offset_ms, sent_at_delay_late", [
    (300_999, (0, 301, 1)), (100_700, (700, 100, 0)), (100_750, (750, 100, 0)), (200_751, (0, 201, 249))],
    ids=["phase-999-ms-away", "700", "750", "751"])
def test_by_default_a_phase_more_than_750_ms_away_is_not_waited_for(direct, offset_ms, sent_at_delay_late):
    """direct_max_wait_ms 750 (the default): a row whose phase is 999 ms away is sent at once with
    its delay rounded up (visible 1 ms after its due ms, never before); one 700 ms away waits for it;
    the bound is inclusive: 750 ms away waits (on its due ms), 751 ms goes at once (249 ms late).
    Mutants: the wait bound ignored (the first row sent at 999 ms); the bound made strict (issue 42,
    item 19: the 750 ms row sent at once, 250 ms late)."""
    assert Settings().direct_max_wait_ms == 750
    direct.settings = direct.deps.settings = dataclasses.replace(direct.settings, direct_max_wait_ms=750)
    sent = sends(direct)
    direct.put_raw(sk(offset_ms, "row"), {"n": "row"})
    poll(direct.deps)
    assert [(at - T0_MS, delay, body["lateness_ms"]) for at, _, delay, body in sent] == [sent_at_delay_late]


@pytest.mark.parametrize("left_ms, aligned", [(1_500, False), (4_999, False), (5_000, True)])
def test_a_direct_poll_near_its_deadline_sends_at_once_instead_of_waiting_for_its_phases(direct, left_ms, aligned):
    """As in the default mode (tests/functional/test_poller.py): with less than ALIGN_RESERVE_MS (5 s)
    of the invocation left, every event goes at once, its delay rounded up (up to a second late,
    never early), instead of waiting up to a second for its phase. GIVEN rows whose phases are 250,
    700, 50 and 999 ms away and 1,500, 4,999 or 5,000 ms left THEN with 1,500 and 4,999 all go at T0,
    with 5,000 each at its phase (on its due ms); and the rows sent are taken out. Kills issue 42's
    item 16 mutants: ``_time_to_align`` dropped, ALIGN_RESERVE_MS cut to 500 ms (the 1,500 ms poll's
    sends end at its 999 ms phase, too late to take the rows out, store.DELETE_RESERVE_MS: each
    delivered again by its orphan check)."""
    from punctual.core.retry import set_deadline

    sent = sends(direct)
    for name, off in {"a": 100_250, "b": 100_700, "c": 200_050, "d": 300_999}.items():
        direct.put_raw(sk(off, name), {"n": name})
    set_deadline(T0_MS + left_ms)
    assert poll(direct.deps).sent == 4
    assert direct.rows() == []  # taken out: no orphan check sends them again
    got = {body["id"]: (at - T0_MS, delay, body["lateness_ms"]) for at, _, delay, body in sent}
    if aligned:
        assert got == {"c": (50, 200, 0), "a": (250, 100, 0), "b": (700, 100, 0), "d": (999, 300, 0)}
    else:
        assert got == {"a": (0, 101, 750), "b": (0, 101, 300), "c": (0, 201, 950), "d": (0, 301, 1)}


def test_the_early_margin_makes_each_timed_event_visible_that_much_after_its_due_ms(direct):
    """direct_early_margin_ms 250, a poll at T0: an event sent with DelaySeconds aims at due + 250 ms
    (so a timer up to 250 ms early still shows it on time), sent at that target's phase; one under a
    second away (or past) goes with no delay, at its due ms (at once): no timer, no margin.
    Mutants: the margin left out (every lateness 0); the margin on the untimed ones too ("soon"
    sent at 950 ms)."""
    direct.settings = direct.deps.settings = dataclasses.replace(direct.settings, direct_early_margin_ms=250)
    sent = sends(direct)
    offsets = {"past": -5_000, "soon": 700, "one": 1_000, "a": 100_250, "b": 200_800}
    for name, off in offsets.items():
        direct.put_raw(sk(off, name), {"n": name})
    poll(direct.deps)
    # targets: past T0-5,000 (now), soon 700 (its due ms), one 1,250, a 100,500, b 201,050; phases:
    # past 0, b 50 (shares past's send, made at 50), one 250, a 500, soon 700
    assert {body["id"]: (at - T0_MS, delay, body["lateness_ms"]) for at, _, delay, body in sent} == {
        "past": (50, 0, 5_050), "b": (50, 201, 250), "one": (250, 1, 250), "a": (500, 100, 250),
        "soon": (700, 0, 0)}


def test_a_task_due_at_the_windows_end_keeps_its_whole_margin_and_so_does_one_not_waited_for(direct):
    """direct_early_margin_ms 1,000 (the most with a 900-s window), the default wait bound (750 ms): a
    row due exactly 900 s after the poll's clock aims at 901 s, beyond 900 s of DelaySeconds from any
    moment in the next second: it is sent a second after now with 900 s, visible on its target. A row
    due in 800 ms is not waited for (past the wait bound): sent at once, it goes with a delay, so with
    the margin: 2 s, visible 1,200 ms after its due ms. Mutants: the phase kept in [now, now + 1 s)
    (edge sent at T0 with 900 s, the margin lost); the margin only for rows a second away (near sent
    with 1 s, a timer up to 200 ms early would show it early: the benchmark's early reading found it)."""
    direct.settings = direct.deps.settings = dataclasses.replace(direct.settings, direct_early_margin_ms=1000,
                                                                 direct_max_wait_ms=750)
    sent = sends(direct)
    direct.put_raw(sk(900_000, "edge"), {"n": "edge"})
    direct.put_raw(sk(800, "near"), {"n": "near"})
    poll(direct.deps)
    assert {body["id"]: (at - T0_MS, delay, body["lateness_ms"]) for at, _, delay, body in sent} == {
        "near": (0, 2, 1_200), "edge": (1_000, 900, 1_000)}
