"""The poller against moto: raw cdk-scheduler rows in -> delay queue out, rule re-armed."""

from __future__ import annotations

import dataclasses
import json

import pytest

from punctual.core.config import META_PK
from punctual.core.cron import ARM_MARGIN_MS, MINUTE_MS
from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS
from punctual.core.usecases.poll import poll
from tests.faults import Faults, InjectedCrash, PartialFailSqs
from tests.functional.helpers import (
    SentLog,
    delay_bodies,
    delete_rows,
    put_many,
    row_map,
    rule_state,
    sk,
)
from tests.support import T0_MS, pointers_of

S = 1000
MIN = MINUTE_MS


def now_ms() -> int:
    import time

    return int(round(time.time() * 1000))


def tick_to(frozen, target_ms: int) -> None:
    delta = target_ms - now_ms()
    assert delta >= 0
    frozen.tick(delta / 1000)


def poll_when_armed(stack, frozen):
    """Travel to the minute the rule is armed for (EventBridge fires in it) and poll."""
    state, minute = rule_state(stack)
    assert state == "ENABLED"
    tick_to(frozen, minute)
    return poll(stack.deps)


def test_default_delays_wake_the_consumer_up_to_1_2s_before_due(stack):
    """Default wake_early_ms = 1200: DelaySeconds is ceil towards due - 1.2 s, so the message is
    visible at most 1.2 s early (the consumer waits the rest) and never earlier than that."""
    # one message per row (these rows are due within a second of each other: grouped, they
    # would share the first one's delay; see test_rows_due_together_share_one_message)
    stack.settings = stack.deps.settings = dataclasses.replace(stack.settings, group_span_ms=0)
    log = SentLog(stack.sqs)
    assert stack.settings.wake_early_ms == 1200
    rows = {
        sk(-1, "past-1ms"): 0,
        sk(1, "in-1ms"): 0,
        sk(1200, "in-1.2s"): 0,
        sk(1201, "in-1.201s"): 1,
        sk(100 * S, "in-100s"): 99,
        sk(900 * S, "window-edge"): 899,
    }
    for key in rows:
        stack.put_raw(key, {"k": key})
    poll(stack.deps)
    assert log.delays() == rows
    for key, delay in rows.items():
        due = int(key[:13])
        assert due - 1200 <= T0_MS + delay * 1000 <= max(due, T0_MS)


def _send_times(stack):
    """(virtual time of the call, DelaySeconds, sk) of every delay-queue entry the poll sends."""
    out = []

    def capture(params, **_):
        now = stack.deps.clock.now_ms()
        out.extend((now, e["DelaySeconds"], pointers_of(json.loads(e["MessageBody"]))[0]["sk"])
                   for e in params["Entries"])
    stack.sqs.meta.events.register("provide-client-params.sqs.SendMessageBatch", capture)
    return out


def test_a_poll_sends_each_message_at_the_phase_that_lands_it_on_its_aligned_wake(stack):
    """aligned_wake_ms = 300, align_step_ms = 100: each message is sent at the moment that makes its
    whole seconds of DelaySeconds land it 300 ms before its row's due ms, or at most the step later
    (planning.aligned_send_times); a row due too soon for that is sent at once, the default way;
    the poll runs less than a second longer. Pins the DelaySeconds and the send times. Mutants: no
    wait for the phases (the aligned messages sent at once: visible up to 700 ms after due); a
    shared send made at its first phase (c then visible 649 ms after its due ms)."""
    stack.settings = stack.deps.settings = dataclasses.replace(
        stack.settings, group_span_ms=0, aligned_wake_ms=300, align_step_ms=100, align_min_messages=3)
    sent = _send_times(stack)
    offsets = {"a": 100_250, "b": 100_700, "c": 200_050, "d": 300_999, "soon": 1_250}
    for name, off in offsets.items():
        stack.put_raw(sk(off, name), {"n": name})

    assert poll(stack.deps).sent == 5

    by_row = {key.split("#")[1]: (at, delay) for at, delay, key in sent}
    # targets (due - 300) a 99,950, b 100,400, c 199,750, d 300,699: phases 950, 400, 750, 699;
    # d and c share the send at 750 (d 51 ms after its phase: still a whole 300 s of delay)
    assert by_row == {
        "soon": (T0_MS, 1),  # aligned, under a second away: at once, ceil((1,250 - wake_early 1,200) / 1,000)
        "b": (T0_MS + 400, 100),
        "d": (T0_MS + 750, 300),
        "c": (T0_MS + 750, 199),
        "a": (T0_MS + 950, 99),
    }
    for name, off in offsets.items():
        at, delay = by_row[name]
        due = T0_MS + off
        if name != "soon":
            assert due - 300 <= at + delay * 1000 < due - 300 + 100
    assert max(at for at, _ in by_row.values()) < T0_MS + 1000


@pytest.mark.parametrize("left_ms, aligned", [(900, False), (4_999, False), (5_000, True)])
def test_a_poll_near_its_deadline_sends_at_once_instead_of_waiting_for_its_phases(stack, frozen, left_ms, aligned):
    """Aligned sends wait up to a second for their phases: a poll with less than ALIGN_RESERVE_MS (5 s)
    of its invocation left sends every message at once instead, visible up to wake_early_ms before
    due as by default, so that Lambda's timeout never cuts it mid-send (its retry would send again
    what it had sent). GIVEN the four rows above and 900, 4,999 or 5,000 ms left WHEN the poll sends
    THEN with 900 and 4,999 every message goes at T0 (DelaySeconds rounded up from due - 1.2 s), with
    5,000 each at its phase; none is sent past the deadline (a send after it is the timeout: the
    poll dies). Kills issue 42's item 16 mutants: ``_time_to_align`` dropped (the 900 ms poll dies at
    its 950 ms phase) and ALIGN_RESERVE_MS cut to 500 ms (the same; at 4,999 ms, aligned)."""
    from punctual.core.retry import set_deadline

    stack.settings = stack.deps.settings = dataclasses.replace(
        stack.settings, group_span_ms=0, aligned_wake_ms=300, align_step_ms=100, align_min_messages=3)
    sent = _send_times(stack)
    for name, off in {"a": 100_250, "b": 100_700, "c": 200_050, "d": 300_999}.items():
        stack.put_raw(sk(off, name), {"n": name})
    deadline = T0_MS + left_ms

    def timeout(**_):
        if now_ms() >= deadline:
            raise InjectedCrash("Lambda's timeout: the poll is cut mid-send")

    stack.sqs.meta.events.register("before-call.sqs.SendMessageBatch", timeout)
    set_deadline(deadline)
    assert poll(stack.deps).sent == 4
    by_row = {key.split("#")[1]: (at - T0_MS, delay) for at, delay, key in sent}
    if aligned:  # as above: visible 300 ms before due, or at most the 100 ms step later
        assert by_row == {"b": (400, 100), "d": (750, 300), "c": (750, 199), "a": (950, 99)}
    else:  # ceil((due - 1,200) / 1,000)
        assert by_row == {"a": (0, 100), "b": (0, 100), "c": (0, 199), "d": (0, 300)}

def test_a_poll_with_fewer_messages_than_align_min_sends_them_all_at_once(stack):
    """Under align_min_messages the poll's second of waiting costs more than the consumers save:
    every message goes at once, made visible up to wake_early_ms (1.2 s) before due as by default."""
    stack.settings = stack.deps.settings = dataclasses.replace(
        stack.settings, group_span_ms=0, aligned_wake_ms=300, align_min_messages=3)
    sent = _send_times(stack)
    stack.put_raw(sk(100_250, "a"), {"n": "a"})
    stack.put_raw(sk(200_050, "b"), {"n": "b"})

    assert poll(stack.deps).sent == 2
    # ceil((due - 1,200) / 1,000): 99,050 -> 100; 198,850 -> 199
    assert sorted((at, delay) for at, delay, _ in sent) == [(T0_MS, 100), (T0_MS, 199)]


def test_a_cluster_is_made_visible_early_enough_for_lambda_to_scale_its_consumers(stack):
    """Rows due in one second that need more consumers than Lambda's first five (here 60 rows at
    consumer_max_rows 5: 12 consumers) are made visible (12 - 5) x 200 ms + 1 s = 2.4 s earlier
    than a lone row, and each message says so (the consumer holds it that much longer); a lone row
    in another second keeps the plain wake-early."""
    stack.settings = stack.deps.settings = dataclasses.replace(stack.settings, group_span_ms=0, consumer_max_rows=5)
    log = SentLog(stack.sqs)
    cluster = [sk(100 * S + 500 + i, f"c{i:02}") for i in range(60)]
    lone = sk(200 * S, "lone")
    for key in [*cluster, lone]:
        stack.put_raw(key, {"k": key})
    poll(stack.deps)
    # due - 1.2 s (wake-early) - 2.4 s: T0 + 96.9 s .. 96.959 s -> ceil 97; the lone row: 199
    assert log.delays() == {**{key: 97 for key in cluster}, lone: 199}
    extras = {json.loads(e["MessageBody"])["sk"]: json.loads(e["MessageBody"]).get("extra_wake_ms") for e in log.entries}
    assert extras == {**{key: 2_400 for key in cluster}, lone: None}


def test_a_cluster_is_shared_over_consumers_a_group_each(stack):
    """600 rows due in one second, consumer_max_rows 1,000: three 250-row groups at most, each
    message telling its consumer to deliver at most 250 rows, made visible a cold start (1 s) earlier
    than a lone row: three consumers, within Lambda's first five."""
    log = SentLog(stack.sqs)
    cluster = [sk(100 * S + i, f"c{i:03}") for i in range(600)]
    put_many(stack, [(key, {"k": key}) for key in cluster])
    poll(stack.deps)
    bodies = [json.loads(e["MessageBody"]) for e in log.entries]
    assert [(len(b["rows"]), b["consumer_rows"], b.get("extra_wake_ms")) for b in bodies] == [
        (250, 250, 1_000), (250, 250, 1_000), (100, 250, 1_000)]
    # ceil((first due - 1,200 - 1,000) / 1,000): 97,800 -> 98; 98,050 -> 99; 98,300 -> 99
    assert [e["DelaySeconds"] for e in log.entries] == [98, 99, 99]


def test_window_rows_sent_with_exact_delays(stack, frozen):
    """wake_early_ms = 0: DelaySeconds is ceil to the due time itself (one message per row)."""
    stack.settings = stack.deps.settings = dataclasses.replace(stack.settings, wake_early_ms=0, group_span_ms=0)
    log = SentLog(stack.sqs)
    rows = {
        sk(-86_400 * S, "past-day"): 0,
        sk(-1, "past-1ms"): 0,
        sk(0, "now"): 0,
        sk(1, "in-1ms"): 1,
        sk(100 * S, "in-100s"): 100,
        sk(100 * S + 1, "in-100.001s"): 101,
        sk(900 * S, "window-edge"): 900,
    }
    for key in rows:
        stack.put_raw(key, {"k": key})
    stack.put_raw(sk(900 * S + 1, "beyond"), {"k": "b"})
    stack.put_raw(sk(3_600 * S, "later"), {"k": "l"})

    report = poll(stack.deps)

    assert log.delays() == rows
    # each body names the DelaySeconds it was sent with (the consumer's pick-up counts from them)
    assert [json.loads(e["MessageBody"])["delay_seconds"] for e in log.entries] == [e["DelaySeconds"] for e in log.entries]
    assert len(log.entries) == len(rows) and log.calls == 1
    assert report.sent == len(rows) and report.rejected == 0
    # only the delay-0 messages are visible at once; the others exactly at their delay
    assert sorted(b["sk"] for b in delay_bodies(stack)) == sorted(k for k, d in rows.items() if d == 0)
    frozen.tick(0.999)
    assert delay_bodies(stack) == []
    frozen.tick(0.001)
    assert [b["sk"] for b in delay_bodies(stack)] == [sk(1, "in-1ms")]
    tick_to(frozen, T0_MS + 100 * S - 1)
    assert delay_bodies(stack) == []
    frozen.tick(0.001)
    assert [b["sk"] for b in delay_bodies(stack)] == [sk(100 * S, "in-100s")]
    frozen.tick(1)
    assert [b["sk"] for b in delay_bodies(stack)] == [sk(100 * S + 1, "in-100.001s")]
    tick_to(frozen, T0_MS + 900 * S - 1)
    assert delay_bodies(stack) == []
    frozen.tick(0.001)
    bodies = delay_bodies(stack)
    assert bodies == [{"pk": "scheduler", "sk": sk(900 * S, "window-edge"), "due_ms": T0_MS + 900 * S,
                       "attempt": 1, "enqueued_ms": T0_MS, "delay_seconds": 900}]
    frozen.tick(3_600)
    assert delay_bodies(stack) == []  # rows beyond the window were never sent
    table = row_map(stack)
    for key in rows:
        assert table[key][ATTR_ENQUEUED_MS] == {"N": str(T0_MS)} and table[key][ATTR_ATTEMPT] == {"N": "1"}
    assert ATTR_ENQUEUED_MS not in table[sk(900 * S + 1, "beyond")]
    # next poll: the next unsent row (due 15:00.001) minus the 300 s lead -> minute 10:00, which is
    # earlier than the window's orphan check (15:00 + 5:00)
    assert rule_state(stack) == ("ENABLED", T0_MS + 10 * MIN)
    assert report.next_minute_ms == T0_MS + 10 * MIN


def test_rule_disabled_when_nothing_pending(stack, frozen):
    poll(stack.deps)
    assert rule_state(stack) == ("DISABLED", None)

    for i in range(3):
        stack.put_raw(sk(i * 60 * S, f"t{i}"), {"i": i})
    poll(stack.deps)
    # in flight: a poll must follow the last one's grace (2:00 + 5:00) to catch a lost message
    assert rule_state(stack) == ("ENABLED", T0_MS + 7 * MIN)
    delete_rows(stack)  # the consumer delivered them
    report = poll_when_armed(stack, frozen)
    assert report.sent == report.in_flight == 0
    assert rule_state(stack) == ("DISABLED", None)


def test_second_poll_sends_nothing_again(stack, frozen):
    log = SentLog(stack.sqs)
    for i in range(25):
        stack.put_raw(sk(i * 30 * S, f"t{i:02}"), {"i": i})  # 0..720 s
    stack.put_raw(sk(1_000 * S, "beyond"), {"i": "b"})
    first = poll(stack.deps)
    assert first.sent == 25
    armed = rule_state(stack)
    assert armed == ("ENABLED", T0_MS + 11 * MIN)  # 1000 s - 300 s = 11:40 -> 11:00
    frozen.tick(5)
    second = poll(stack.deps)
    assert (second.sent, second.in_flight, second.skipped) == (0, 25, 0)
    assert len(log.entries) == 25
    assert rule_state(stack) == armed
    # the consumer delivers and deletes the window's rows; the next poll takes the beyond row only
    for key in row_map(stack):
        if key != sk(1_000 * S, "beyond"):
            stack.ddb.delete_item(TableName=stack.settings.table_name,
                                  Key={"pk": {"S": "scheduler"}, "sk": {"S": key}})
    third = poll_when_armed(stack, frozen)
    assert third.sent == 1
    assert len(log.entries) == 26 and json.loads(log.entries[-1]["MessageBody"])["sk"] == sk(1_000 * S, "beyond")


class RecordingSqs:
    """Stands in for SQS when thousands of messages are sent: moto's SendMessage recomputes the
    queue's attributes over every stored message (O(n^2)), which says nothing about the poller."""

    def __init__(self, real):
        self.real = real
        self.entries: list[dict] = []
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self.real, name)

    def send_message_batch(self, QueueUrl, Entries):  # noqa: N803 (boto3's names)
        assert len(Entries) <= 10 and len({e["Id"] for e in Entries}) == len(Entries)
        self.calls += 1
        self.entries += Entries
        return {"Successful": [{"Id": e["Id"], "MessageId": f"m{len(self.entries)}-{e['Id']}",
                                "MD5OfMessageBody": ""} for e in Entries], "Failed": []}


def _big_window(stack, n: int, pad_bytes: int):
    pad = "x" * pad_bytes
    step = 900 * S // n
    put_many(stack, [(sk(i * step, f"task-{i:06}"), {"pad": pad}) for i in range(n)])
    faults = Faults(stack.ddb)
    rec = RecordingSqs(stack.sqs)
    stack.deps.sqs = rec
    report = poll(stack.deps)
    sent = [p["sk"] for e in rec.entries for p in pointers_of(json.loads(e["MessageBody"]))]
    assert report.sent == n == len(sent) == len(set(sent))  # all sent, exactly once
    # rows due within group_span_ms of a message's first row share it; 10 messages per call
    groups = [[int(p["sk"][:13]) for p in pointers_of(json.loads(e["MessageBody"]))] for e in rec.entries]
    assert all(g[-1] - g[0] <= stack.settings.group_span_ms for g in groups)
    assert len(groups) < n if step < stack.settings.group_span_ms else len(groups) == n
    assert rec.calls == -(-len(rec.entries) // 10)
    assert all(0 <= e["DelaySeconds"] <= 900 for e in rec.entries)
    assert rule_state(stack)[0] == "ENABLED"
    return faults


def test_window_over_1mb_is_paginated_and_sent_once(stack, frozen):
    faults = _big_window(stack, 1_500, 760)  # ~1.2 MB of rows in the window
    assert faults.count("Query") >= 2  # DynamoDB pages at 1 MB


@pytest.mark.long
def test_window_with_3k_rows(stack, frozen):
    assert _big_window(stack, 3_000, 500).count("Query") >= 2


@pytest.mark.long
def test_window_with_50k_rows(stack, frozen):
    assert _big_window(stack, 50_000, 500).count("Query") >= 25


def _fill(stack, n=25):
    keys = [sk(i * 10 * S, f"t{i:02}") for i in range(n)]
    for k in keys:
        stack.put_raw(k, {"k": k})
    return keys


def test_batch_partial_failure_retried_nothing_skipped(stack, frozen):
    keys = _fill(stack)
    flaky = PartialFailSqs(stack.sqs, {keys[0], keys[9], keys[10], keys[24]}, sender_fault=False, times=2)
    stack.deps.sqs = flaky
    report = poll(stack.deps)
    assert flaky.failed_entries == 8
    assert (report.sent, report.failed) == (25, 0)
    frozen.tick(901)
    bodies = delay_bodies(stack)
    assert sorted(b["sk"] for b in bodies) == keys  # each exactly once


@pytest.mark.parametrize("sender_fault", [False, True])
def test_permanent_send_failure_releases_claim_and_next_poll_sends(stack, frozen, sender_fault):
    keys = _fill(stack, 12)
    bad = keys[3]
    times = 1 if sender_fault else 6  # a sender fault is not retried; others use up the 6 attempts
    flaky = PartialFailSqs(stack.sqs, {bad}, sender_fault=sender_fault, times=times)
    stack.deps.sqs = flaky
    report = poll(stack.deps)
    assert (report.sent, report.failed) == (11, 1)
    row = row_map(stack)[bad]
    assert ATTR_ENQUEUED_MS not in row  # claim released
    # a poll follows within a minute or two to retry it
    state, minute = rule_state(stack)
    assert state == "ENABLED" and minute <= now_ms() + ARM_MARGIN_MS + MIN
    second = poll_when_armed(stack, frozen)
    assert second.sent == 1
    frozen.tick(901)
    bodies = delay_bodies(stack)
    assert sorted(b["sk"] for b in bodies) == keys
    # attempts count sends that reached the delay queue: a refusal for the message's own content
    # (SenderFault) counts, SQS failing does not (issue 28)
    assert next(b for b in bodies if b["sk"] == bad)["attempt"] == (2 if sender_fault else 1)


def test_throttling_everywhere_still_sends_all(stack, frozen):
    keys = _fill(stack, 35)
    f = Faults(stack.ddb, stack.sqs, stack.events)
    f.throttle("SendMessageBatch", times=3).throttle("SendMessageBatch", times=2, first=6)
    f.throttle("UpdateItem", times=3).throttle("UpdateItem", times=4, first=10)
    f.throttle("Query", times=3).throttle("GetItem", times=2).throttle("PutRule", times=2)
    report = poll(stack.deps)
    assert (report.sent, report.failed) == (35, 0)
    frozen.tick(901)
    assert sorted(b["sk"] for b in delay_bodies(stack)) == keys
    assert rule_state(stack)[0] == "ENABLED"


def test_crash_after_claim_before_send_loses_nothing(stack, frozen):
    keys = _fill(stack, 8)  # due 0..70 s
    Faults(stack.sqs).crash_before("SendMessageBatch")
    with pytest.raises(InjectedCrash):
        poll(stack.deps)
    assert all(ATTR_ENQUEUED_MS in r for r in row_map(stack).values())  # claimed, never sent
    assert delay_bodies(stack) == []
    # the safety net armed at the start still stands
    state, minute = rule_state(stack)
    assert state == "ENABLED" and minute >= T0_MS + stack.settings.orphan_grace_ms
    sent: list[dict] = []
    for _ in range(5):
        if rule_state(stack)[0] == "DISABLED" or len(sent) == len(keys):
            break
        poll_when_armed(stack, frozen)
        sent += delay_bodies(stack)
    assert sorted(b["sk"] for b in sent) == keys
    assert {b["attempt"] for b in sent} == {2}
    assert all(b["enqueued_ms"] >= int(b["sk"][:13]) + stack.settings.orphan_grace_ms for b in sent)


def test_crash_after_send_before_final_arm(stack, frozen):
    keys = _fill(stack, 8)
    log = SentLog(stack.sqs)
    # two sends: the row due now at once, the seven others together at their shared phase (aligned)
    Faults(stack.sqs).crash_after("SendMessageBatch", nth=2)
    with pytest.raises(InjectedCrash):
        poll(stack.deps)
    assert len(log.entries) == 8
    state, minute = rule_state(stack)
    assert state == "ENABLED" and minute >= T0_MS + stack.settings.orphan_grace_ms
    report = poll_when_armed(stack, frozen)  # the safety-net poll
    assert report.sent == 0 and report.in_flight == 8
    assert len(log.entries) == 8  # no duplicate
    assert sorted(b["sk"] for b in delay_bodies(stack)) == keys


def test_a_poll_dying_between_its_aligned_sends_is_finished_by_its_retry(stack, frozen):
    """The poll sends the row due now at once and dies before the seven others' phase: they are
    claimed, not sent. Lambda's retry of the invocation (the same token, a minute later) sends them
    at once (they are its own claims), each once; the row sent before the crash goes again (a
    duplicate after a crash, invariant 5). Mutant: the retry not taking its own claims over (the
    seven wait for the orphan check, 5 minutes)."""
    keys = _fill(stack, 8)
    log = SentLog(stack.sqs)
    Faults(stack.sqs).crash_after("SendMessageBatch", nth=1)
    with pytest.raises(InjectedCrash):
        poll(stack.deps, token="invocation-1")
    assert log.sks() == [keys[0]]
    frozen.tick(60)
    report = poll(stack.deps, token="invocation-1")
    assert report.sent == 8
    assert sorted(log.sks()) == sorted([keys[0], *keys])


def test_lost_message_is_resent_as_orphan(stack, frozen):
    keys = _fill(stack, 5)  # 0..40 s
    poll(stack.deps)
    frozen.tick(41)
    assert len(delay_bodies(stack)) == 5  # received and deleted, but never delivered: lost
    report = poll_when_armed(stack, frozen)  # orphan check: 40 s + grace -> minute 6:00
    assert now_ms() == T0_MS + 6 * MIN
    assert report.sent == 5
    bodies = delay_bodies(stack)
    assert sorted(b["sk"] for b in bodies) == keys and {b["attempt"] for b in bodies} == {2}
    assert {r[ATTR_ATTEMPT]["N"] for r in row_map(stack).values()} == {"2"}


def test_a_past_due_rows_orphan_check_counts_from_its_send_not_its_due(stack, frozen):
    """A row put an hour past due (a "run now", a redriven row) is sent at once by a poll at
    T0 + 20 s, and its message is lost. The poll that looks for it is armed for the first minute
    after its send plus the orphan grace (5:20 -> 6:00), and resends it then (attempt 2); none comes
    before, to find it still in flight. Kills issue 42's item 19 mutant: the grace of a row sent
    counted from its due alone (the next poll armed for 1:00: an invocation more per past-due send)."""
    frozen.tick(20)
    key = sk(-3_600 * S, "an-hour-late")
    stack.put_raw(key, {"n": "x"})
    assert poll(stack.deps).sent == 1
    assert rule_state(stack) == ("ENABLED", T0_MS + 6 * MIN)
    assert [b["sk"] for b in delay_bodies(stack)] == [key]  # received and deleted, never delivered: lost
    report = poll_when_armed(stack, frozen)
    assert now_ms() == T0_MS + 6 * MIN and report.sent == 1
    (body,) = delay_bodies(stack)
    assert (body["sk"], body["attempt"]) == (key, 2)

def _visible(stack) -> int:
    attrs = stack.sqs.get_queue_attributes(QueueUrl=stack.settings.delay_queue_url,
                                           AttributeNames=["ApproximateNumberOfMessages"])
    return int(attrs["Attributes"]["ApproximateNumberOfMessages"])


def test_orphans_wait_while_the_delay_queue_has_a_backlog_and_are_resent_once_it_drains(stack, frozen):
    """A consumer that is behind (burst, capped concurrency) is not a lost message: resending
    every overdue row would double the backlog and use up attempts until the rows were
    rejected as undeliverable while their first message was still queued."""
    keys = _fill(stack, 5)  # 0..40 s
    poll(stack.deps)
    frozen.tick(41)
    assert _visible(stack) == 5  # all visible, none received: the consumer is behind
    report = poll_when_armed(stack, frozen)  # the orphan check, 6:00
    assert now_ms() == T0_MS + 6 * MIN
    assert (report.sent, report.deferred, report.in_flight, report.rejected) == (0, 5, 5, 0)
    assert {r[ATTR_ATTEMPT]["N"] for r in row_map(stack).values()} == {"1"}
    state, minute = rule_state(stack)  # checked again after another grace
    assert state == "ENABLED" and minute >= now_ms() + stack.settings.orphan_grace_ms - MIN
    # The backlog drains, but these 5 messages were lost on the way: the next check resends them.
    assert len(delay_bodies(stack)) == 5
    report = poll_when_armed(stack, frozen)
    assert (report.sent, report.deferred) == (5, 0)
    bodies = delay_bodies(stack)
    assert sorted(b["sk"] for b in bodies) == keys and {b["attempt"] for b in bodies} == {2}


def test_a_backlog_smaller_than_the_orphans_does_not_hold_them_back(stack, frozen):
    keys = _fill(stack, 5)
    poll(stack.deps)
    frozen.tick(41)
    # 3 of the 5 messages were lost (gone from the queue); 2 still wait
    url = stack.settings.delay_queue_url
    got = stack.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3)["Messages"]
    stack.sqs.delete_message_batch(QueueUrl=url, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
    assert _visible(stack) == 2
    report = poll_when_armed(stack, frozen)
    assert (report.sent, report.deferred) == (5, 0)
    assert {r[ATTR_ATTEMPT]["N"] for r in row_map(stack).values()} == {"2"}
    assert sorted(row_map(stack)) == keys


def test_messages_in_flight_count_as_a_backlog(stack, frozen):
    """A throttled or failing consumer holds the messages it received (in flight, not visible):
    they are on their way, not lost; the orphans wait, and use no attempt (issue 28: a consumer
    throttled for an hour had valid rows rejected as undeliverable)."""
    _fill(stack, 5)
    poll(stack.deps)
    frozen.tick(41)
    stack.sqs.receive_message(QueueUrl=stack.settings.delay_queue_url, MaxNumberOfMessages=5,
                              VisibilityTimeout=3600)
    assert _visible(stack) == 0
    report = poll_when_armed(stack, frozen)
    assert (report.sent, report.deferred) == (0, 5)
    assert {r[ATTR_ATTEMPT]["N"] for r in row_map(stack).values()} == {"1"}


def test_orphans_are_resent_when_the_backlog_cannot_be_read(stack, frozen):
    _fill(stack, 5)
    poll(stack.deps)
    frozen.tick(41)
    assert _visible(stack) == 5
    faults = Faults(stack.sqs).fail("GetQueueAttributes", code="AccessDenied", times=10)
    report = poll_when_armed(stack, frozen)
    assert faults.trace.count("GetQueueAttributes") == 1  # not retryable: one call, then resend
    assert (report.sent, report.deferred) == (5, 0)


def test_a_backlog_also_keeps_sent_rows_out_of_the_undeliverable_queue(stack, frozen):
    old = {ATTR_ENQUEUED_MS: {"N": str(T0_MS - 3_600 * S)}}
    stack.put_raw(sk(-3_600 * S, "last-attempt-queued"), {"k": 1}, **old, **{ATTR_ATTEMPT: {"N": "5"}})
    stack.sqs.send_message(QueueUrl=stack.settings.delay_queue_url, MessageBody="{}")  # the backlog
    report = poll(stack.deps)
    assert (report.rejected, report.deferred, report.sent) == (0, 1, 0)
    assert stack.bodies(stack.settings.rejected_queue_url) == []
    assert list(row_map(stack)) == [sk(-3_600 * S, "last-attempt-queued")]


def test_exhausted_rows_are_rejected_as_undeliverable(stack, frozen):
    old = {ATTR_ENQUEUED_MS: {"N": str(T0_MS - 3_600 * S)}}
    stack.put_raw(sk(-3_600 * S, "dead"), {"k": 1}, **old, **{ATTR_ATTEMPT: {"N": "5"}})
    stack.put_raw(sk(-3_600 * S + 1, "last-chance"), {"k": 2}, **old, **{ATTR_ATTEMPT: {"N": "4"}})
    report = poll(stack.deps)
    assert report.sent == 1 and report.rejected == 1
    rejected = stack.bodies(stack.settings.rejected_queue_url)
    assert [(r["code"], r["sk"]) for r in rejected] == [("undeliverable", sk(-3_600 * S, "dead"))]
    assert rejected[0]["item"]["payload"] == {"M": {"k": {"S": "1"}}}
    assert list(row_map(stack)) == [sk(-3_600 * S + 1, "last-chance")]
    assert [b["attempt"] for b in delay_bodies(stack)] == [5]


def test_malformed_rows_rejected_valid_rows_still_sent(stack, frozen):
    good = _fill(stack, 3)
    bad = {
        "1798761600#seconds": ("seconds_not_ms", {"k": 1}),
        sk(5 * S, "no-payload"): ("missing_payload", None),
        sk(6 * S, "text-payload"): ("payload_not_map", "TEXT"),
        sk(7 * S, "huge"): ("oversize", {"big": "x" * 300_000}),
        f"{T0_MS + 8 * S}#ctl\x01id": ("bad_id", {"k": 1}),
        "2027-01-01T00:00:00Z#iso": ("iso_string", {"k": 1}),  # sorts after every ms key
        f"{7_258_118_400_000}#y2200": ("year_out_of_range", {"k": 1}),
    }
    for key, (_, payload) in bad.items():
        if payload == "TEXT":
            stack.ddb.put_item(TableName=stack.settings.table_name, Item={
                "pk": {"S": "scheduler"}, "sk": {"S": key}, "payload": {"S": "{}"}})
        else:
            stack.put_raw(key, payload)
    report = poll(stack.deps)
    assert report.sent == 3 and report.rejected == len(bad)
    rejected = {r["sk"]: r for r in stack.bodies(stack.settings.rejected_queue_url)}
    assert {k: r["code"] for k, r in rejected.items()} == {k: code for k, (code, _) in bad.items()}
    assert all(r["reason"] and r["source"] == "poller" for r in rejected.values())
    assert sorted(row_map(stack)) == good  # malformed rows deleted
    assert sorted(b["sk"] for b in delay_bodies(stack)) == good[:1]  # the others are delayed
    assert rule_state(stack)[0] == "ENABLED"


def _editor_arms_before_final_cas(stack, minute_fn):
    """Run the editor's arm_no_later_than right before the poller's final compare-and-set."""
    from punctual.core.arming import arm_no_later_than

    fired = []

    def hook(params, **_):
        cond = params.get("ConditionExpression", "")
        if params["Key"]["pk"]["S"] == META_PK and cond.startswith(("#v = ", "attribute_not_exists(#v)")) \
                and not fired:
            fired.append(minute_fn())
            now = stack.deps.clock.now_ms()
            arm_no_later_than(stack.ddb, stack.settings, stack.deps.clock, fired[0],
                              replace_before_ms=now - stack.settings.stale_arm_seconds * S)

    stack.ddb.meta.events.register("provide-client-params.dynamodb.UpdateItem", hook)
    return fired


@pytest.mark.parametrize("with_row", [False, True])
def test_arming_race_rule_never_later_than_editor(stack, frozen, with_row):
    _fill(stack, 3)
    stack.put_raw(sk(3_600 * S, "next-hour"), {"k": 1})  # the poller alone would arm 58:00
    editor_minute = T0_MS + 3 * MIN

    def editor():
        if with_row:  # the editor's new row, inside the poller's window, not yet sent
            stack.put_raw(sk(8 * MIN, "editor-row"), {"k": 2})  # needs a poll by 8 - 5 (the lead) = 3 min
        return editor_minute

    fired = _editor_arms_before_final_cas(stack, editor)
    report = poll(stack.deps)
    assert fired == [editor_minute]
    state, minute = rule_state(stack)
    assert state == "ENABLED" and minute <= editor_minute
    assert report.next_minute_ms == minute
    if with_row:
        nxt = poll_when_armed(stack, frozen)
        assert nxt.sent == 1  # the editor's row went out before its due time
        assert now_ms() <= T0_MS + 8 * MIN - stack.settings.lead_ms + MIN


def test_arming_race_editor_later_does_not_move_the_poller_later(stack, frozen):
    stack.put_raw(sk(1_800 * S, "in-30-min"), {"k": 1})  # poller arms 30:00 - 5:00 (the lead) = 25:00
    _editor_arms_before_final_cas(stack, lambda: T0_MS + 50 * MIN)
    poll(stack.deps)
    assert rule_state(stack) == ("ENABLED", T0_MS + 25 * MIN)


def test_released_row_polled_soon_even_with_rows_in_flight_beyond(stack, frozen):
    keys = _fill(stack, 3)
    # a row after the window already sent (by the editor): its orphan check is ~25 min away
    stack.put_raw(sk(1_200 * S, "editor-sent"), {"k": 1}, **{ATTR_ENQUEUED_MS: {"N": str(T0_MS)},
                                                               ATTR_ATTEMPT: {"N": "1"}})
    stack.deps.sqs = PartialFailSqs(stack.sqs, {keys[0]}, sender_fault=True, times=1)
    report = poll(stack.deps)
    assert report.failed == 1
    state, minute = rule_state(stack)
    assert state == "ENABLED" and minute <= now_ms() + ARM_MARGIN_MS + MIN


def test_the_poll_a_deployment_triggers_re_arms_a_rule_cloudformation_reset(stack, frozen):
    """A deployment that re-puts the rule leaves it DISABLED with the placeholder while the meta
    row still holds the arm; the construct then invokes the poller (resync_on_deploy). That one
    poll puts the rule back in line with what is pending."""
    from punctual.core.cron import one_shot_cron

    stack.put_raw(sk(3_600 * S, "in-an-hour"), {"k": 1})
    poll(stack.deps)
    state, armed = rule_state(stack)
    assert state == "ENABLED"
    # CloudFormation's update: the template's rule, DISABLED, placeholder minute (2199-12-31 23:59)
    stack.events.put_rule(Name=stack.settings.rule_name, ScheduleExpression=one_shot_cron(7_258_118_340_000),
                          State="DISABLED")
    frozen.tick(60)
    poll(stack.deps)  # the deploy-time invocation (the handler ignores its event)
    assert rule_state(stack) == ("ENABLED", armed)


def test_a_brought_table_with_rows_is_served_by_the_deployments_first_poll(stack, frozen):
    """table=: a cdk-scheduler user's table already holds rows (no meta row, no stream record ever
    seen by the editor). The poll the deployment triggers sends every row due in its window, past
    due ones included, and arms the rule for the first row beyond it."""
    rows = {sk(-365 * 86_400 * S, "a-year-late"): 0, sk(-1, "just-due"): 0, sk(10 * MIN, "in-10-min"): 599}  # wakes <= 1 s early
    for key in rows:
        stack.put_raw(key, {"legacy": key})
    stack.put_raw(sk(3 * 86_400 * S, "in-3-days"), {"legacy": "later"})
    assert rule_state(stack) == ("DISABLED", None)  # as CloudFormation created it
    log = SentLog(stack.sqs)

    report = poll(stack.deps)  # the resync invocation

    assert log.delays() == rows
    assert report.sent == 3 and report.rejected == 0
    # the next poll: the orphan check of the window's last row (10:00 + 5:00) comes before the
    # row in 3 days (its minute minus the 2 min lead)
    assert rule_state(stack) == ("ENABLED", T0_MS + 15 * MIN)
