"""One poll at a time, by the meta row's lease (not by reserved concurrency), against moto.

A poll takes the lease (``polling_ms``) with its safety-net arm. A poll that finds a live lease
sends nothing, arms the next minute (so a poll follows) and stops; a lease older than
``poll_lease_seconds`` is a dead poll's, and is taken over.
"""

from __future__ import annotations

import dataclasses
import json

from punctual.core.arming import arm_no_later_than, read_arm
from punctual.core.cron import ARM_MARGIN_MS, MINUTE_MS, next_minute_after
from punctual.core.usecases.poll import poll
from tests.functional.helpers import SentLog, rule_state, sk
from tests.support import T0_MS

S = 1000


def _running_poll_since(stack, started_ms: int) -> None:
    """The meta row as a poll that started at ``started_ms`` leaves it until its final arm."""
    s, clock = stack.settings, stack.deps.clock
    arm_no_later_than(stack.ddb, s, clock, next_minute_after(started_ms + s.orphan_grace_ms),
                      replace_before_ms=started_ms + 1, polling_since_ms=started_ms)


def test_a_poll_defers_to_a_running_one_and_arms_the_next_minute(stack, frozen):
    # GIVEN rows due within the window and a poll that started 10 s ago and still runs
    stack.put_raw(sk(30 * S, "a"), {"n": 1})
    _running_poll_since(stack, T0_MS - 10 * S)
    version = read_arm(stack.ddb, stack.settings, stack.deps.clock).version
    log = SentLog(stack.sqs)
    # WHEN the rule fires again
    report = poll(stack.deps)
    # THEN nothing is sent twice, the running poll is made to re-plan, and a poll follows soon
    assert report.busy and report.sent == 0 and report.read == 0
    assert log.entries == []
    after = read_arm(stack.ddb, stack.settings, stack.deps.clock)
    assert after.version > version
    assert after.polling_ms == T0_MS - 10 * S  # the lease stays with the running poll
    state, minute = rule_state(stack)
    assert state == "ENABLED" and minute == next_minute_after(T0_MS + ARM_MARGIN_MS)
    assert report.summary()["busy"] is True


def test_a_dead_polls_lease_is_taken_over(stack, frozen):
    # GIVEN a poll that started longer ago than the lease (its Lambda timed out)
    stack.put_raw(sk(30 * S, "a"), {"n": 1})
    _running_poll_since(stack, T0_MS - stack.settings.poll_lease_ms)
    log = SentLog(stack.sqs)
    # WHEN a poll runs, THEN it takes the lease and sends the window
    report = poll(stack.deps)
    assert not report.busy and report.sent == 1
    assert [json.loads(e["MessageBody"])["sk"] for e in log.entries] == [sk(30 * S, "a")]
    assert read_arm(stack.ddb, stack.settings, stack.deps.clock).polling_ms is None  # released at its end


def test_the_lease_follows_the_setting(stack, frozen):
    # GIVEN a shorter lease, a poll 61 s old is dead, one 59 s old is not
    stack.deps = dataclasses.replace(stack.deps, settings=dataclasses.replace(stack.settings,
                                                                              poll_lease_seconds=60))
    _running_poll_since(stack, T0_MS - 59 * S)
    assert poll(stack.deps).busy
    frozen.tick(2)  # the running poll started 61 s ago now
    report = poll(stack.deps)
    assert not report.busy


def test_sequential_polls_never_see_their_own_lease(stack, frozen):
    """A finished poll releases the lease: the next one, a minute later, runs in full."""
    stack.put_raw(sk(30 * MINUTE_MS, "later"), {"n": 1})
    assert not poll(stack.deps).busy
    frozen.tick(60)
    assert not poll(stack.deps).busy


def test_a_retry_of_a_crashed_poll_takes_its_live_lease_and_resends_what_it_claimed(stack, frozen):
    # GIVEN a poll (token "evt-1") that claimed three rows and died before sending them
    from tests.faults import Faults, InjectedCrash

    keys = [sk(d * S, f"r{d}") for d in (90, 95, 400)]
    for key in keys:
        stack.put_raw(key, {"k": key})
    faults = Faults(stack.sqs).crash_before("SendMessageBatch")
    try:
        poll(stack.deps, token="evt-1")
    except InjectedCrash:
        pass
    faults.clear()
    assert SentLog(stack.sqs).entries == [] and read_arm(stack.ddb, stack.settings, stack.deps.clock).polling_ms
    frozen.tick(60)  # Lambda's first async retry: the same event, 1 min later; the lease is still live
    # WHEN another firing (another token) runs, THEN it defers to the live lease
    assert poll(stack.deps, token="evt-2").busy
    # WHEN the retry runs, THEN it takes the lease and sends the three rows now, before they are due
    log = SentLog(stack.sqs)
    report = poll(stack.deps, token="evt-1")
    assert not report.busy and report.sent == 3
    assert sorted(p for p in log.sks()) == sorted(keys)
    assert read_arm(stack.ddb, stack.settings, stack.deps.clock).polling_ms is None


def test_a_later_poll_leaves_rows_another_poll_claimed_in_flight(stack, frozen):
    stack.put_raw(sk(90 * S, "a"), {"n": 1})
    assert poll(stack.deps, token="evt-1").sent == 1
    frozen.tick(60)
    report = poll(stack.deps, token="evt-2")
    assert report.sent == 0 and report.in_flight == 1  # sent by evt-1: not resent, only watched


def test_invocation_token_is_the_rule_events_id_or_the_request_id():
    from types import SimpleNamespace

    from punctual.core.usecases.poll import invocation_token

    assert invocation_token({"id": "e-1", "detail-type": "Scheduled Event"}, SimpleNamespace(aws_request_id="r")) == "e-1"
    assert invocation_token({}, SimpleNamespace(aws_request_id="r-1")) == "r-1"
    assert invocation_token(None, None) is None


def test_a_poll_that_fails_gives_its_lease_back_and_asks_for_the_next_poll(stack, frozen):
    """A poll whose window query fails (DynamoDB reads failing) does not hold its lease for 300 s:
    it removes it, and asks the consumer for the next poll through the delay queue (a PollRequest
    for as soon as possible); the next poll, another invocation, runs at once instead of deferring
    (issue 28: delivery came 275 s after DynamoDB recovered)."""
    from punctual.core.models import PollRequest
    from tests.faults import Faults

    stack.put_raw(sk(30 * MINUTE_MS, "later"), {"x": "1"})
    faults = Faults(stack.ddb).fail("Query", "InternalError", times=6)
    try:
        poll(stack.deps, token="first")
    except Exception as exc:  # noqa: BLE001 - the poll raises: Lambda retries it
        assert "InternalError" in str(exc)
    else:
        raise AssertionError("the poll did not fail")
    faults.clear()
    state = read_arm(stack.ddb, stack.settings, stack.deps.clock)
    # the lease is free; its token stays for the next poll to take over what "first" claimed
    assert state.polling_ms is None and state.polling_token == "first"
    (body,) = [json.loads(m["Body"]) for m in stack.drain(stack.settings.delay_queue_url)]
    # as soon as possible: the time it failed (after its retries' backoff)
    assert T0_MS < PollRequest.model_validate(body).poll_by_ms <= stack.deps.clock.now_ms()
    assert body["reason"].startswith("a poll failed")
    report = poll(stack.deps, token="second")
    assert not report.busy and report.read == 1
    taken = read_arm(stack.ddb, stack.settings, stack.deps.clock)
    assert taken.lease_taken_from == "first" and taken.polling_token is None  # "second" finished


def test_with_the_table_failing_the_rule_alone_is_never_moved_later(stack, frozen):
    """The consumer arms the rule alone while DynamoDB writes fail (ensure_poll). A request for a
    poll hours away must not move the rule off an earlier minute it holds, the one in progress
    (its firing may be pending) or a later one: that poll is the one rows due now wait for, and
    nothing else would bring it back while the table fails (a stall of 20 minutes in the bench's
    faults scenario). A minute that has passed is replaced."""
    from punctual.core.cron import one_shot_cron
    from punctual.core.usecases.ensure_poll import ensure_poll
    from tests.faults import Faults

    def rule():
        r = stack.rule()
        return r["State"], r.get("ScheduleExpression")

    clock = stack.deps.clock
    soon = next_minute_after(T0_MS + ARM_MARGIN_MS)
    hours = T0_MS + 10 * 60 * MINUTE_MS
    Faults(stack.ddb).fail("UpdateItem", "InternalServerError", times=10_000)
    assert ensure_poll(stack.deps, None) is None  # the table refused: the rule alone
    assert rule() == ("ENABLED", one_shot_cron(soon))
    assert ensure_poll(stack.deps, hours) is None
    assert rule() == ("ENABLED", one_shot_cron(soon))  # not moved later
    frozen.tick((soon - T0_MS + 20 * S) / S)  # 20 s into that minute: its firing may be pending
    assert ensure_poll(stack.deps, hours) is None
    assert rule() == ("ENABLED", one_shot_cron(soon))
    frozen.tick(60)  # that minute has passed: the rule is armed for what is asked
    assert ensure_poll(stack.deps, hours) is None
    assert rule() == ("ENABLED", one_shot_cron(hours))
    assert ensure_poll(stack.deps, None) is None  # and moved earlier when a sooner poll is asked
    assert rule() == ("ENABLED", one_shot_cron(next_minute_after(clock.now_ms() + ARM_MARGIN_MS)))


def test_arming_the_rule_alone_never_moves_it_from_an_earlier_minute_still_to_come(stack, frozen):
    """DynamoDB writes failing: the consumer arms the rule alone for each poll request. A request for
    a later minute (an editor's row due hours ahead) must not replace an earlier minute the rule
    holds and has not reached (a failed poll's request for the next minute): that cancelled the
    poll, and with it the chain of requests, until a poll 5 minutes after the recovery (the quick
    faults scenario's 30-minute "dynamodb writes" outage: 320 s after the recovery, promise 120 s).
    The minute in progress may still fire (EventBridge fires anywhere in it): kept; once it has
    passed, a request moves the rule."""
    from punctual.core.arming import rule_alone_minute
    from punctual.core.cron import one_shot_cron, parse_one_shot_cron
    from punctual.core.usecases.ensure_poll import ensure_poll
    from tests.faults import Faults

    soon = next_minute_after(T0_MS + ARM_MARGIN_MS)
    hours = soon + 6 * 60 * MINUTE_MS
    def armed() -> int:
        return parse_one_shot_cron(stack.rule()["ScheduleExpression"])

    Faults(stack.ddb).fail("UpdateItem", "InternalError", times=1_000)
    assert ensure_poll(stack.deps, None) is None  # the table refused: the rule alone, for soon
    assert armed() == soon
    assert ensure_poll(stack.deps, hours) is None
    assert armed() == soon  # kept: its poll is still coming
    frozen.tick((soon + 5_000 - stack.deps.clock.now_ms()) / 1000)
    assert ensure_poll(stack.deps, hours) is None
    assert armed() == soon  # in progress: its firing may be pending
    frozen.tick(60)
    assert ensure_poll(stack.deps, hours) is None
    assert armed() == hours  # passed (fired, or dead): replaced
    # the decision alone
    assert rule_alone_minute(hours, soon, soon - 1) is None
    assert rule_alone_minute(hours, soon, soon + MINUTE_MS - 1) is None  # the minute in progress
    assert rule_alone_minute(hours, soon, soon + MINUTE_MS) == hours
    assert rule_alone_minute(soon, hours, T0_MS) == soon and rule_alone_minute(soon, None, T0_MS) == soon
    assert one_shot_cron(soon)  # a valid minute


def test_the_poll_after_a_stream_batch_was_given_up_resends_the_rows_it_claimed_at_once(stack, frozen):
    """The editor died after claiming rows until Lambda gave its batch up; the failure notice reaches
    the consumer through the delay queue, which notes the batch in the meta row as it arms a poll.
    That poll resends the batch's rows now, with their attempt (the dead claim's count), and forgets
    the batch; a row claimed by a live batch outside it stays in flight. Mutant: the poll ignoring the
    note left the row in flight until its orphan check, 580-1,150 s late in the outage matrix."""
    from punctual.core.models import ATTR_ATTEMPT, task_from_item
    from punctual.core.planning import stream_claim_token
    from punctual.core.store import claim
    from punctual.lambda_events import stream_failure_record
    from tests.consumer_support import run_consumer

    s, clock = stack.settings, stack.deps.clock
    dead, live = sk(4 * MINUTE_MS, "dead"), sk(5 * MINUTE_MS, "live")
    for key, seq in ((dead, "1003"), (live, "2000")):
        stack.put_raw(key, {"x": "1"})
        (item,) = [r for r in stack.rows() if r["sk"]["S"] == key]
        assert claim(stack.ddb, s, clock, task_from_item(item, s.partitions), T0_MS, stream_claim_token(seq)) == 1
    records = [{"dynamodb": {"SequenceNumber": n}} for n in ("1001", "1003", "1004")]
    stack.sqs.send_message(QueueUrl=s.delay_queue_url,
                           MessageBody=json.dumps(stream_failure_record(records, "arn:s", "arn:f", 3, T0_MS)))
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert read_arm(stack.ddb, s, clock).given_up == frozenset({"1001-1004"})
    stack.deps.clock.frozen.tick(60)
    sent = SentLog(stack.sqs)
    report = poll(stack.deps, token="rule-event-1")
    assert report.sent == 1 and report.in_flight == 1
    (entry,) = sent.entries
    body = json.loads(entry["MessageBody"])
    assert (body["sk"], body["attempt"], entry["DelaySeconds"]) == (dead, 1, 179)  # due in 3 min, woken 1 s early
    rows = {r["sk"]["S"]: r for r in stack.rows()}
    assert rows[dead][ATTR_ATTEMPT] == {"N": "1"} and rows[dead]["punctual_claim"] == {"S": "rule-event-1"}
    assert rows[live]["punctual_claim"] == {"S": stream_claim_token("2000")}
    assert read_arm(stack.ddb, s, clock).given_up == frozenset()  # handled: forgotten


def test_a_poll_armed_alone_while_the_table_failed_is_written_to_the_meta_row_once_it_is_back(stack, frozen):
    """The table refusing writes, the consumer arms the rule alone for a poll request (an editor's
    row due in 10 minutes) and asks again 20 s later. Once the table is back, an editor arming a row
    due later than that, but earlier than the meta row's live arm, syncs the rule from the meta row
    and moves it off the poll armed alone. The request that comes back writes that poll into the meta
    row and puts the rule back. Mutant: no request again (the rule stays on the editor's minute: its
    row 20 minutes late). The minute in progress armed alone is left where it is (not moved to the
    next one: 30-minute table outages read 70 s after the recovery instead of 10 s)."""
    from punctual.core.arming import sync_rule
    from punctual.core.cron import one_shot_cron
    from punctual.core.models import PollRequest
    from tests.consumer_support import run_consumer
    from tests.faults import Faults

    s, clock = stack.settings, stack.deps.clock
    hours, wanted, editors = (T0_MS + m * MINUTE_MS for m in (180, 10, 30))
    sync_rule(stack.ddb, stack.events, s, clock, arm_no_later_than(stack.ddb, s, clock, hours, T0_MS))
    faults = Faults(stack.ddb).fail("UpdateItem", "InternalServerError", times=10_000)
    stack.sqs.send_message(QueueUrl=s.delay_queue_url, MessageBody=PollRequest(poll_by_ms=wanted, reason="r").body())
    assert run_consumer(stack) == {"batchItemFailures": []}
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(wanted)  # armed alone
    faults.clear()
    sync_rule(stack.ddb, stack.events, s, clock, arm_no_later_than(stack.ddb, s, clock, editors, T0_MS))
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(editors)  # moved off it
    frozen.tick(RETRY_S)
    assert run_consumer(stack) == {"batchItemFailures": []}  # the request again
    assert rule_state(stack) == ("ENABLED", wanted)
    assert read_arm(stack.ddb, s, clock).armed_ms == wanted


RETRY_S = 20


def test_once_the_table_is_back_a_request_leaves_the_minute_in_progress_armed_alone(stack, frozen):
    """The rule armed alone for the next minute while the table failed; 20 s into that minute the
    table is back and the request comes again: the meta row gets the first minute still safe, but
    the rule keeps the minute in progress, whose firing may be pending (ensure_poll, one
    DescribeRule). Mutant: syncing the rule to the meta row moved that poll a minute later (30-minute
    table outages: 70 s after the recovery instead of 10 s)."""
    from punctual.core.cron import one_shot_cron
    from punctual.core.usecases.ensure_poll import ensure_poll
    from tests.faults import Faults

    s, clock = stack.settings, stack.deps.clock
    faults = Faults(stack.ddb).fail("UpdateItem", "InternalServerError", times=10_000)
    soon = next_minute_after(T0_MS + ARM_MARGIN_MS)
    assert ensure_poll(stack.deps, None) is None and stack.rule()["ScheduleExpression"] == one_shot_cron(soon)
    faults.clear()
    frozen.tick((soon - T0_MS + 20 * S) / S)
    state = ensure_poll(stack.deps, None)
    assert state is not None and state.armed_ms == read_arm(stack.ddb, s, clock).armed_ms == soon + MINUTE_MS
    assert stack.rule()["ScheduleExpression"] == one_shot_cron(soon)


def test_a_poll_armed_alone_is_asked_for_again_for_two_minutes_only(stack, frozen):
    """While the table keeps failing, each failed poll asks afresh: a request whose poll was armed
    alone goes round every 20 s for 2 minutes after the time it wanted (ARMED_ALONE_ASK_AGAIN_MS),
    then stops. Mutant: no limit, and every failed poll's chain went on until the recovery (the
    quick faults scenario: 2,590 invocations instead of 2,094, +$17.52 per 1M)."""
    from punctual.core.models import PollRequest
    from tests.consumer_support import receive_event, run_consumer
    from tests.faults import Faults

    s = stack.settings
    Faults(stack.ddb).fail("UpdateItem", "InternalServerError", times=10_000)
    stack.sqs.send_message(QueueUrl=s.delay_queue_url, MessageBody=PollRequest(poll_by_ms=T0_MS, reason="r").body())
    rounds = 0
    while (event := receive_event(stack))["Records"]:
        assert run_consumer(stack, event) == {"batchItemFailures": []}
        rounds += 1
        frozen.tick(RETRY_S)
    assert rounds == 1 + 120 // RETRY_S  # asked at T0, then again at +20 .. +100 s; at +120 s no more


def test_a_failure_notice_beside_a_later_poll_request_arms_the_first_safe_minute(stack, frozen):
    """A poll failed for good (Lambda's OnFailure record of its rule event: a poll wanted as soon as
    possible) and an editor asked for a poll by its own row's due, 10 minutes ahead: one batch. The
    failed poll's rows may be due in a minute: the rule is armed for the first minute still safe,
    whose poll sends the row due in 2 minutes on time. Kills issue 42's item 14 mutant: the notice's
    "as soon as possible" dropped when the batch holds a later request (the rule armed for the
    request's minute: the row 8 minutes late)."""
    from punctual.core.models import PollRequest
    from punctual.lambda_events import async_failure_record
    from tests.consumer_support import receive_event, run_consumer

    s = stack.settings
    soon = sk(2 * MINUTE_MS, "behind-the-failed-poll")
    stack.put_raw(soon, {"x": "1"})
    notice = async_failure_record({"id": "rule-event-1", "source": "aws.events"},
                                  "arn:aws:lambda:us-east-1:123456789012:function:punctual-poller", 3, T0_MS, "boom")
    later = PollRequest(poll_by_ms=T0_MS + 10 * MINUTE_MS, reason="an editor could not arm")
    for body in (later.body(), json.dumps(notice)):
        stack.sqs.send_message(QueueUrl=s.delay_queue_url, MessageBody=body)
    event = receive_event(stack)
    assert len(event["Records"]) == 2  # one batch
    assert run_consumer(stack, event) == {"batchItemFailures": []}
    first_safe = next_minute_after(T0_MS + ARM_MARGIN_MS)
    assert first_safe == T0_MS + MINUTE_MS and rule_state(stack) == ("ENABLED", first_safe)
    frozen.tick((first_safe - T0_MS) / S)  # the rule fires
    sent = SentLog(stack.sqs)
    assert poll(stack.deps).sent == 1
    (entry,) = sent.entries
    assert (json.loads(entry["MessageBody"])["sk"], entry["DelaySeconds"]) == (soon, 59)  # woken 1.2 s early
