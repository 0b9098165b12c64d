"""Window planning: delays (ceil, 0, 900), what a poll sends, and when it polls next."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from punctual.core.cron import MINUTE_MS
from punctual.core.keys import encode_sk
from punctual.core.models import Task
from punctual.core.planning import (
    RowState,
    defer_orphans,
    delay_seconds,
    next_poll_minute,
    orphan_count,
    plan_window,
    row_state,
)

T0 = 1_798_761_600_000
W, GRACE, MAX = 900_000, 300_000, 5


def task(due: int, id: str = "t", enqueued: int | None = None, attempt: int = 0) -> Task:
    return Task(pk="scheduler", sk=encode_sk(due, id), id=id, due_ms=due, payload={},
                enqueued_ms=enqueued, attempt=attempt)


@pytest.mark.parametrize(
    "remaining, expected",
    [(-5_000, 0), (0, 0), (1, 1), (999, 1), (1_000, 1), (1_001, 2), (899_999, 900), (900_000, 900),
     (900_001, 900), (10**9, 900)],
)
def test_delay_seconds(remaining, expected):
    assert delay_seconds(T0 + remaining, T0) == expected


def test_plan_window_picks_new_and_orphans_within_window():
    now = T0
    tasks = [
        task(now - 60_000, "past"),                                    # past due, new -> delay 0
        task(now + 1_500, "soon"),                                     # -> delay 2
        task(now + W, "edge"),                                         # last ms of the window
        task(now + W + 1, "beyond"),                                   # next poll's
        task(now - 30_000, "inflight", enqueued=now - 40_000, attempt=1),
        task(now - 600_000, "orphan", enqueued=now - 600_000, attempt=2),
        task(now - 600_000, "dead", enqueued=now - 600_000, attempt=MAX),
        task(now - 600_000, "released-dead", attempt=MAX),             # released after MAX sends
    ]
    plan = plan_window(now, tasks, W, GRACE, MAX)
    sent = {s.task.id: s.delay_seconds for s in plan.sends}
    assert sent == {"past": 0, "soon": 2, "edge": 900, "orphan": 0}
    assert [s.task.sk for s in plan.sends] == sorted(s.task.sk for s in plan.sends)
    assert plan.in_flight == 1
    assert sorted(t.id for t in plan.exhausted) == ["dead", "released-dead"]
    # a poll must follow the latest send's grace
    assert plan.orphan_check_ms == now + W + GRACE


def test_deferring_orphans_keeps_them_in_flight_and_everything_else_as_planned():
    now = T0
    tasks = [
        task(now + 1_500, "new"),
        task(now - 30_000, "inflight", enqueued=now - 40_000, attempt=1),
        task(now - 600_000, "orphan", enqueued=now - 600_000, attempt=2),
        task(now - 600_000, "dead", enqueued=now - 600_000, attempt=MAX),
        task(now - 600_000, "released-dead", attempt=MAX),  # never re-sent: not waiting in any queue
    ]
    plan = plan_window(now, tasks, W, GRACE, MAX)
    assert orphan_count(plan) == 2  # "orphan" (resend) and "dead" (sent, about to be rejected)
    later = defer_orphans(plan, now, GRACE)
    assert [s.task.id for s in later.sends] == ["new"]
    assert [t.id for t in later.exhausted] == ["released-dead"]
    assert later.in_flight == plan.in_flight + 2 == 3
    assert later.orphan_check_ms == max(plan.orphan_check_ms, now + GRACE)
    assert orphan_count(later) == 0
    assert defer_orphans(later, now, GRACE) is later  # nothing to defer: the same plan


def test_plan_window_validates_window():
    with pytest.raises(ValueError):
        plan_window(T0, [], 900_001, GRACE, MAX)
    with pytest.raises(ValueError):
        plan_window(T0, [], 0, GRACE, MAX)


def test_empty_plan():
    plan = plan_window(T0, [], W, GRACE, MAX)
    assert (plan.sends, plan.exhausted, plan.in_flight, plan.orphan_check_ms) == ([], [], 0, None)


def test_row_state_boundaries():
    t = task(T0, enqueued=T0 - 5_000, attempt=1)
    assert row_state(t, T0 + GRACE, GRACE, MAX) is RowState.IN_FLIGHT
    assert row_state(t, T0 + GRACE + 1, GRACE, MAX) is RowState.ORPHAN
    # enqueued after due (past-due send): visible from the enqueue time
    late = task(T0, enqueued=T0 + 60_000, attempt=1)
    assert row_state(late, T0 + 60_000 + GRACE, GRACE, MAX) is RowState.IN_FLIGHT
    assert row_state(task(T0), T0 + 10**9, GRACE, MAX) is RowState.NEW


def test_next_poll_minute():
    now = T0 + 5_000
    assert next_poll_minute(now, None, None, 120_000) is None
    # next unsent due 20:30 after T0 -> latest minute starting by due - lead = 18:30 -> 18:00
    assert next_poll_minute(now, T0 + 20 * MINUTE_MS + 30_000, None, 120_000) == T0 + 18 * MINUTE_MS
    # orphan check at 6:00.001 -> first minute starting at or after it: 7:00
    assert next_poll_minute(now, None, T0 + 6 * MINUTE_MS + 1, 120_000) == T0 + 7 * MINUTE_MS
    # the earlier of the two wins
    assert next_poll_minute(now, T0 + 20 * MINUTE_MS, T0 + 6 * MINUTE_MS, 120_000) == T0 + 6 * MINUTE_MS
    # both in the past / current minute -> next minute (never a started one)
    assert next_poll_minute(now, T0, T0, 120_000) == T0 + MINUTE_MS


@settings(max_examples=500, deadline=None)
@given(
    now=st.integers(T0 - 10**10, T0 + 10**10),
    offsets=st.lists(st.integers(-10**7, 2 * W), min_size=1, max_size=30),
    window=st.integers(1, W),
    send_lag=st.integers(0, 5_000),
)
def test_planned_delays_never_early_never_above_900(now, offsets, window, send_lag):
    tasks = [task(now + off, f"t{i}") for i, off in enumerate(offsets)]
    plan = plan_window(now, tasks, window, GRACE, MAX)
    assert all(s.task.due_ms <= now + window for s in plan.sends)
    assert len(plan.sends) == sum(1 for off in offsets if off <= window)
    for s in plan.sends:
        assert 0 <= s.delay_seconds <= 900
        assert now + s.delay_seconds * 1000 >= s.task.due_ms  # never early
        # recomputed at send time (the clock moved on): still never early
        d = delay_seconds(s.task.due_ms, now + send_lag)
        assert 0 <= d <= s.delay_seconds
        assert now + send_lag + d * 1000 >= s.task.due_ms


@settings(max_examples=300, deadline=None)
@given(
    now=st.integers(T0, T0 + 10**10),
    due=st.one_of(st.none(), st.integers(T0 - 10**7, T0 + 10**11)),
    check=st.one_of(st.none(), st.integers(T0 - 10**7, T0 + 10**11)),
    lead=st.integers(0, 300_000),
)
def test_next_poll_minute_is_in_the_future(now, due, check, lead):
    minute = next_poll_minute(now, due, check, lead)
    if due is None and check is None:
        assert minute is None
    else:
        assert minute > now and minute % MINUTE_MS == 0
        if due is not None and due - lead > now + MINUTE_MS:
            assert minute <= due - lead  # armed by due - lead


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.integers(-2 * W, W + 60_000),  # due, relative to now
            st.one_of(st.none(), st.integers(-3 * W, 120_000)),  # send mark, relative to now (None: never sent)
            st.integers(0, MAX + 1),  # attempt
        ),
        max_size=25,
    ),
)
def test_deferring_orphans_never_drops_a_row_and_always_checks_again(rows):
    now = T0
    tasks = [task(now + due, f"r{i}", None if mark is None else now + mark, attempt)
             for i, (due, mark, attempt) in enumerate(rows)]
    plan = plan_window(now, tasks, W, GRACE, MAX)
    later = defer_orphans(plan, now, GRACE)

    def accounted(p):
        return len(p.sends) + p.in_flight + len(p.exhausted)

    assert accounted(later) == accounted(plan)  # every row of the window is still somewhere
    assert [s.task.sk for s in later.sends] == [s.task.sk for s in plan.sends if not s.resend]  # new rows still go
    assert all(t.enqueued_ms is None for t in later.exhausted)  # only never-re-sent rows are still rejected
    assert orphan_count(later) == 0
    if orphan_count(plan):
        assert later.orphan_check_ms is not None and later.orphan_check_ms >= now + GRACE  # a poll follows
    else:
        assert later is plan


# -- groups: rows due together share one delay-queue message ---------------------------

def test_group_by_due_splits_by_span_from_the_first_row():
    from punctual.core.planning import group_by_due

    dues = [0, 400, 1000, 1001, 2500, 9000]
    assert [list(g) for g in group_by_due(dues, [1] * 6, span_ms=1000)] == [[0, 1, 2], [3], [4], [5]]
    assert [list(g) for g in group_by_due(dues, [1] * 6, span_ms=0)] == [[0], [1], [2], [3], [4], [5]]
    assert group_by_due([], [], span_ms=1000) == []


def test_group_by_due_caps_rows_and_bytes_and_never_drops_a_big_row():
    from punctual.core.planning import group_by_due

    assert [len(g) for g in group_by_due([5] * 7, [1] * 7, span_ms=10, max_rows=3)] == [3, 3, 1]
    assert [len(g) for g in group_by_due([5] * 5, [40, 40, 90, 10, 10], span_ms=10, max_bytes=100)] == [2, 2, 1]
    with pytest.raises(ValueError):
        group_by_due([1, 2], [1], span_ms=10)


@given(st.lists(st.integers(0, 5000), max_size=60).map(sorted), st.integers(0, 2000), st.integers(1, 7))
def test_groups_cover_every_row_once_in_order_within_span_and_cap(dues, span, cap):
    from punctual.core.planning import group_by_due

    groups = group_by_due(dues, [1] * len(dues), span_ms=span, max_rows=cap)
    assert [i for g in groups for i in g] == list(range(len(dues)))
    for g in groups:
        assert 1 <= len(g) <= cap and dues[g[-1]] - dues[g[0]] <= span


def test_group_extra_wake_grows_with_size_up_to_its_cap():
    from punctual.core.planning import GROUP_MAX_EXTRA_WAKE_MS, group_extra_wake_ms

    assert group_extra_wake_ms(1) == 0 and 0 < group_extra_wake_ms(10) < group_extra_wake_ms(500)
    assert group_extra_wake_ms(100_000) == GROUP_MAX_EXTRA_WAKE_MS


def test_a_cluster_is_woken_early_for_the_consumers_lambda_must_add_beyond_its_first_five():
    from punctual.core.planning import (
        MAX_CLUSTER_CONSUMERS,
        MAX_EXTRA_WAKE_MS,
        cluster_extra_wake_ms,
        cluster_rows_per_consumer,
        extra_wake_ms,
        message_consumer_rows,
        rows_per_second,
    )

    assert cluster_extra_wake_ms(1_000, 1_000) == 0  # one consumer: the group's own extra
    assert cluster_extra_wake_ms(5_000, 1_000) == 1_000  # Lambda's first five, from a cold start
    assert cluster_extra_wake_ms(5_001, 1_000) == 1 * 200 + 1_000  # a sixth: 200 ms and a cold start
    assert cluster_extra_wake_ms(50_000, 1_000) == 45 * 200 + 1_000  # the 50,000 burst: 10 s
    assert cluster_extra_wake_ms(70_000, 1_000) == MAX_EXTRA_WAKE_MS == 12_000
    assert cluster_extra_wake_ms(1, 0) == 0  # no budget given: one consumer a row, one row
    # a consumer delivers a group's 250 rows of a cluster while Lambda can run that many by due
    # (5,000 rows: 20 consumers); past 60 consumers (15,000 rows) the cluster is shared over 60
    assert cluster_rows_per_consumer(5_000, 1_000) == 250 and cluster_rows_per_consumer(1, 1_000) == 250
    assert MAX_CLUSTER_CONSUMERS == 60 and cluster_rows_per_consumer(15_000, 1_000) == 250
    assert cluster_rows_per_consumer(50_000, 1_000) == 834 and cluster_rows_per_consumer(90_000, 1_000) == 1_000
    assert cluster_rows_per_consumer(5_000, 100) == 100  # consumer_max_rows bounds it
    # what a message says: nothing when one consumer takes the cluster or the budget is the consumer's own
    assert message_consumer_rows(5_000, 1_000) == 250 and message_consumer_rows(250, 1_000) == 0
    assert message_consumer_rows(90_000, 1_000) == 0 and message_consumer_rows(5_000, 100) == 0
    # a message takes the larger of its group's own extra and its cluster's (consumers at that share)
    assert extra_wake_ms(250, 250, 1_000) == 498 and extra_wake_ms(1, 1, 1_000) == 0
    assert extra_wake_ms(250, 5_000, 1_000) == 15 * 200 + 1_000  # 20 consumers of 250
    assert extra_wake_ms(250, 50_000, 1_000) == MAX_EXTRA_WAKE_MS  # 60 consumers of 834
    assert rows_per_second([1_000, 1_999, 2_000, 5_500, 5_501]) == {1_000: 2, 2_000: 1, 5_000: 2}


def test_a_row_claimed_by_a_poll_that_died_is_resent_at_once_and_not_deferred_nor_exhausted():
    """``died``: this poll's own token (an earlier attempt of it died) and the token of the lease it
    took over. Mutant: exhausting such a row at max_attempts rejected a valid row whose last count
    came from a claim whose poll died before sending (the bench's faults scenario lost 2 tasks)."""
    mine = Task(pk="scheduler", sk=encode_sk(T0 + 60_000, "a"), id="a", due_ms=T0 + 60_000, payload={},
                enqueued_ms=T0 - 1_000, attempt=1, claim_token="evt-1")
    assert row_state(mine, T0, 300_000, 5) is RowState.IN_FLIGHT  # someone else's view
    assert row_state(mine, T0, 300_000, 5, died={"evt-2"}) is RowState.IN_FLIGHT
    assert row_state(mine, T0, 300_000, 5, died={"evt-2", "evt-1"}) is RowState.ORPHAN
    plan = plan_window(T0, [mine], 900_000, 300_000, 5, died={"evt-1"})
    assert [(s.task.sk, s.resend) for s in plan.sends] == [(mine.sk, False)]  # not an orphan to defer
    used_up = mine.model_copy(update={"attempt": 5})
    assert row_state(used_up, T0, 300_000, 5, died={"evt-1"}) is RowState.ORPHAN  # its count is taken over
    assert row_state(used_up, T0 + 400_000, 300_000, 5, died={"evt-2"}) is RowState.EXHAUSTED
    released = used_up.model_copy(update={"enqueued_ms": None})  # a send refused 5 times for its content
    assert row_state(released, T0, 300_000, 5, died={"evt-1"}) is RowState.EXHAUSTED
    # only a row whose claims died MAX_TAKEOVERS times is given up (store.claim counts takeovers)
    from punctual.core.planning import MAX_TAKEOVERS, undeliverable

    poison = mine.model_copy(update={"takeovers": MAX_TAKEOVERS})
    assert row_state(poison.model_copy(update={"takeovers": MAX_TAKEOVERS - 1}), T0, 300_000, 5,
                     died={"evt-1"}) is RowState.ORPHAN
    assert row_state(poison, T0, 300_000, 5, died={"evt-1"}) is RowState.EXHAUSTED
    assert undeliverable(poison).reason == f"still pending after 1 sends and {MAX_TAKEOVERS} claims whose work died " \
        "(a row that kills whoever sends it?)"
    assert undeliverable(mine).reason == "still pending after 1 sends"


# -- what a poll arms at its end (planning.after_send / minute_after_poll) ----------------------

def test_a_poll_follows_the_grace_of_rows_someone_else_claimed_and_polls_for_released_rows():
    from punctual.core.planning import after_send

    # GIVEN a window plan with one row in flight (its orphan check), one row another sender
    # claimed after the poll read it, and one row whose send failed for good (released)
    plan = plan_window(T0, [task(T0 + 10_000, "flying", enqueued=T0 - 1_000, attempt=1)], W, GRACE, MAX)
    # WHEN the poll works out its follow-up
    follow = after_send(plan, skipped_dues=[T0 + 500_000], failed_dues=[T0 + 700_000, T0 + 600_000],
                        now_ms=T0, orphan_grace_ms=GRACE)
    # THEN the next poll comes after the skipped row's grace and by the earliest released row
    assert follow.orphan_check_ms == T0 + 500_000 + GRACE
    assert follow.unsent_due_ms == T0 + 600_000
    # AND a skipped row already past due counts from now
    assert after_send(plan_window(T0, [], W, GRACE, MAX), [T0 - 5_000], [], T0, GRACE).orphan_check_ms == T0 + GRACE


def test_a_poll_never_arms_later_than_an_editors_arm_it_did_not_see():
    from punctual.core.cron import next_minute_after
    from punctual.core.planning import FollowUp, minute_after_poll

    nothing = FollowUp()
    # nothing pending: disable
    assert minute_after_poll(T0, nothing, None, None, 120_000, None, None) is None
    # the first unsent row beyond the window: its due - lead
    due = T0 + 3_600_000
    assert minute_after_poll(T0, nothing, due, None, 120_000, None, None) == due - 120_000
    # an editor armed an earlier minute meanwhile (for a row the poll cannot see): keep it
    editor = T0 + 5 * MINUTE_MS
    assert minute_after_poll(T0, nothing, due, None, 120_000, None, editor) == editor
    # ... but never a minute that has begun
    assert minute_after_poll(T0, nothing, due, None, 120_000, T0 + MINUTE_MS, T0) == next_minute_after(T0 + 10_000)
    # the arm unchanged since the poll read it: the poll's own plan
    assert minute_after_poll(T0, nothing, due, None, 120_000, editor, editor) == due - 120_000
    # rows in flight after the window: a poll after their orphan check
    assert minute_after_poll(T0, FollowUp(T0 + 1_000_000), None, None, 120_000, None, None) == T0 + 17 * MINUTE_MS
    # the follow-up's released row wins over a later first unsent row
    assert minute_after_poll(T0, FollowUp(None, T0 + 600_000), due, None, 120_000, None, None) == \
        T0 + 600_000 - 120_000


# -- claims whose work died (planning.DeadClaims) -------------------------------------------

def test_dead_claims_hold_their_tokens_and_every_record_of_a_given_up_stream_batch():
    """A stream batch given up on is kept as its sequence numbers' range: each record's claim token
    (planning.stream_claim_token) is in it, and nothing else. Mutants: a bound excluded; tokens
    compared as strings (``"999" > "1000"``)."""
    from punctual.core.planning import DeadClaims, given_up_batch, stream_claim_token

    batch = given_up_batch("990", "1005")
    assert batch == "990-1005"
    dead = DeadClaims(frozenset({"rule-event-7"}), frozenset({batch, given_up_batch("5", "5")}))
    assert "rule-event-7" in dead and "rule-event-8" not in dead
    assert [stream_claim_token(str(n)) in dead for n in (989, 990, 999, 1005, 1006, 5, 4)] == [
        False, True, True, True, False, True, False]
    assert "990" not in dead and "stream:" not in dead and "stream:x1" not in dead and None not in dead
    assert stream_claim_token("1000") not in DeadClaims()
    # an entry of the meta row's set that is not a range (written by hand?) names no claim, and
    # does not stop the poll that reads it
    odd = DeadClaims(frozenset(), frozenset({"x-y", "7", "1-2-3", batch}))
    assert [stream_claim_token(str(n)) in odd for n in (7, 1, 2, 1000)] == [False, False, False, True]
    # what a notice may carry and is not a batch
    assert given_up_batch("", "5") is None and given_up_batch("7", "6") is None and given_up_batch("a", "b") is None
    assert given_up_batch("0099", "100") == "99-100"


def test_an_editor_arms_soon_over_a_dead_arm_and_its_own_minute_otherwise():
    """A meta arm that began more than stale_arm ago never had its poll (arming.minute_over_dead_arm):
    the editor arms the first safe minute, not its row's hours away. Mutant: the row's minute (a
    30-minute table-write outage then left rows 10,450 s late, tests/reliability/test_outages.py)."""
    from punctual.core.arming import ArmState, minute_over_dead_arm

    now, stale = T0 + 20 * MINUTE_MS + 30_000, 15 * MINUTE_MS
    far = T0 + 3 * 60 * MINUTE_MS
    soon = T0 + 21 * MINUTE_MS  # the first minute starting >= 10 s from now
    assert minute_over_dead_arm(far, ArmState(T0 + 5 * MINUTE_MS - 1, 7), now, stale) == soon
    assert minute_over_dead_arm(far, ArmState(T0 + 5 * MINUTE_MS + 30_000, 7), now, stale) == far  # begun 15 min ago: live
    assert minute_over_dead_arm(far, ArmState(None, 7), now, stale) == far  # disabled: nothing pending
    assert minute_over_dead_arm(T0 + 21 * MINUTE_MS, ArmState(T0, 7), now, stale) == T0 + 21 * MINUTE_MS


# -- sends aligned to the due ms (planning.aligned_send_times) --------------------------------

def test_aligned_sends_pin_each_phase_and_share_a_send_within_the_step():
    """Each message is sent at the moment in [now, now + 1 s) a whole number of seconds before its
    target; phases within the step share a send, made at the LAST of them (sent at the first, the
    later ones' DelaySeconds would round up a whole second). Mutants: the first phase of a step;
    a target under a second away planned."""
    from punctual.core.planning import aligned_send_times

    now = T0
    targets = [now + 5_300, now + 2_340, now + 999, now + 61_310, now + 1_000, now + 7_900]
    plan = aligned_send_times(targets, now, 100)
    # phases: 300, 340, (999: under a second away), 310, 0, 900
    assert plan == [(now + 0, [4]), (now + 340, [0, 3, 1]), (now + 900, [5])]
    for at, idx in plan:
        for i in idx:
            d = delay_seconds(targets[i], at)
            assert targets[i] <= at + d * 1000 < targets[i] + 100
    assert aligned_send_times([], now, 100) == []
    with pytest.raises(ValueError):
        aligned_send_times(targets, now, 0)


@settings(max_examples=300, deadline=None)
@given(
    now=st.integers(T0, T0 + 10**10),
    offsets=st.lists(st.integers(-5_000, 900_000), max_size=40),
    step=st.integers(1, 1000),
)
def test_an_aligned_send_is_never_visible_before_its_target_nor_a_step_after(now, offsets, step):
    from punctual.core.planning import aligned_send_times

    targets = [now + off for off in offsets]
    plan = aligned_send_times(targets, now, step)
    planned = [i for _, idx in plan for i in idx]
    assert sorted(planned) == [i for i, off in enumerate(offsets) if off >= 1000]
    assert [at for at, _ in plan] == sorted(at for at, _ in plan)
    for at, idx in plan:
        assert now <= at < now + 1000
        for i in idx:
            d = delay_seconds(targets[i], at)
            assert 1 <= d <= 900
            assert targets[i] <= at + d * 1000 < targets[i] + step


@settings(max_examples=300, deadline=None)
@given(
    now=st.integers(T0, T0 + 10**10),
    offsets=st.lists(st.integers(-5_000, 900_000), max_size=40),
    step=st.integers(1, 1000),
)
def test_a_direct_send_is_never_visible_before_its_due_ms_nor_a_step_after(now, offsets, step):
    """Direct delivery plans every event (``near``): one under a second away is sent at its due ms
    with no delay, one past due at once; each is visible on its due ms or less than a step after (a
    past-due one less than a step after now). Mutant: near targets left out of the plan."""
    from punctual.core.planning import aligned_send_times

    dues = [now + off for off in offsets]
    plan = aligned_send_times(dues, now, step, near=True)
    assert sorted(i for _, idx in plan for i in idx) == list(range(len(dues)))
    for at, idx in plan:
        assert now <= at < now + 1000
        for i in idx:
            d = delay_seconds(dues[i], at)
            assert 0 <= d <= 900
            assert dues[i] <= at + d * 1000 < max(dues[i], now) + step


# a direct sender's plan: its clock, its rows' due ms (from now), its align step and its wait bound
DIRECT_PLANS = dict(now=st.integers(T0, T0 + 10**10), offsets=st.lists(st.integers(-5_000, 900_000), max_size=40),
                    step=st.integers(1, 1000), max_wait=st.integers(0, 1000))


@settings(max_examples=300, deadline=None)
@given(**DIRECT_PLANS)
def test_a_direct_send_waits_at_most_max_wait_and_is_late_by_less_than_a_second_minus_it(now, offsets, step,
                                                                                           max_wait):
    """``max_wait_ms``: a phase further than that is not waited for: the event goes at now (with the
    bucket it falls in, at most a step later), never early, and less than 1,000 - max_wait (+ that
    step) after its due ms. Mutant: the far ones sent at their phase anyway (a wait over max_wait)."""
    from punctual.core.planning import aligned_send_times

    dues = [now + off for off in offsets]
    plan = aligned_send_times(dues, now, step, near=True, max_wait_ms=max_wait)
    assert sorted(i for _, idx in plan for i in idx) == list(range(len(dues)))
    for at, idx in plan:
        assert now <= at <= now + max_wait  # never a longer wait
        for i in idx:
            visible = at + delay_seconds(dues[i], at) * 1000
            assert visible >= dues[i]
            # a far one, sent with a bucket up to a step after now: < 1,000 - max_wait + that step late
            assert visible - max(dues[i], now) < 1000 - max_wait + step


@pytest.mark.parametrize("offset, margin, max_wait, expected", [
    (1_000, 250, 1000, 1_250), (900_000, 1000, 750, 901_000), (999, 1000, 1000, 999), (0, 1000, 750, 0),
    (-5_000, 1000, 0, -5_000), (60_000, 0, 750, 60_000), (750, 500, 750, 750), (751, 500, 750, 1_251),
])
def test_a_direct_target_carries_the_early_margin_only_when_a_timer_is_involved(offset, margin, max_wait, expected):
    """Under a second away (or past) and waited for: planned at its due ms, sent then with no delay
    (visible once sent); any other: planned with DelaySeconds, aimed at due + margin (751 ms away
    with a wait bound of 750: its phase is at 251 ms, sent with 1 s, rather than at once with 2 s).
    Mutants: the margin on every target (a task due in 999 ms would wait for a second more); the wait
    bound ignored (751 ms: sent at once with 2 s, visible 1,249 ms after its due ms)."""
    from punctual.core.planning import direct_target_ms

    assert direct_target_ms(T0 + offset, T0, margin, max_wait) == T0 + expected


@pytest.mark.parametrize("offset, margin, expected", [
    (0, 1000, 0), (-5_000, 1000, 0), (1, 1000, 2), (800, 1000, 2), (1_000, 1000, 2), (1_001, 1000, 3),
    (1, 0, 1), (60_000, 0, 60), (899_500, 1000, 900),
])
def test_a_direct_event_goes_with_no_delay_once_due_else_towards_due_plus_the_margin(offset, margin, expected):
    """Whatever the plan: a send at or after the due ms has no timer (DelaySeconds 0); any other is
    rounded up towards due + margin, so even one not waited for (sent a second early) keeps it.
    Mutant: the margin only for events a second away (800 ms -> 1 s, visible 200 ms after due)."""
    from punctual.core.planning import direct_delay_seconds

    assert direct_delay_seconds(T0 + offset, T0, margin) == expected


@settings(max_examples=300, deadline=None)
@given(**DIRECT_PLANS, margin=st.integers(0, 1000))
def test_every_direct_send_with_a_timer_keeps_the_whole_margin(now, offsets, step, max_wait, margin):
    """Planned as the direct sender plans (targets from direct_target_ms, the wait bound, buckets), each
    event either goes with no delay at or after its due ms (no timer), or is visible at due + margin at
    the earliest under an exact timer (so a timer up to the margin early is never early), and less
    than 1,000 - max_wait (+ a step) after that. Mutants: the margin only for events a second away; an
    event under a second away but not waited for planned at its due ms (sent at once, a second late)."""
    from punctual.core.planning import aligned_send_times, direct_delay_seconds, direct_target_ms

    dues = [now + off for off in offsets]
    plan = aligned_send_times([direct_target_ms(d, now, margin, max_wait) for d in dues], now, step, near=True,
                              max_wait_ms=max_wait)
    assert sorted(i for _, idx in plan for i in idx) == list(range(len(dues)))
    for at, idx in plan:
        for i in idx:
            d = direct_delay_seconds(dues[i], at, margin)
            assert 0 <= d <= 900
            if d == 0:
                assert at >= dues[i]
            else:
                assert dues[i] + margin <= at + d * 1000 < dues[i] + margin + 1000 - max_wait + step


@pytest.mark.parametrize("max_wait", [0, 750, 1000])
def test_a_target_beyond_the_longest_delay_is_sent_900_s_before_it_whatever_the_wait_bound(max_wait):
    """A target more than 900 s away is out of DelaySeconds' reach from now: its phase is waited for,
    past max_wait (900.999 s: at 999 ms); one 901 s away (a task due at the window's end, plus a margin
    of 1 s) has no moment in the next second a whole number of seconds, at most 900, before it: it is
    sent 900 s before it, a second after now. 900 s exactly is reached from now. Mutants: the phase in
    [now, now + 1 s) (901 s sent at now with 900 s: visible 1 s before the target); the wait bound
    applied to them (sent at now, 900 s clamped: visible up to a second before the target)."""
    from punctual.core.planning import aligned_send_times

    def plan(offset: int) -> list[tuple[int, list[int]]]:
        return aligned_send_times([T0 + offset], T0, 100, near=True, max_wait_ms=max_wait)

    assert plan(901_000) == [(T0 + 1_000, [0])] and delay_seconds(T0 + 901_000, T0 + 1_000) == 900
    assert plan(900_999) == [(T0 + 999, [0])] and delay_seconds(T0 + 900_999, T0 + 999) == 900
    assert plan(900_000) == [(T0, [0])]
