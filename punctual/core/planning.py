"""Window planning: what a poll sends, with which DelaySeconds, and when to poll next.

Pure functions of (now, rows, settings). Times are epoch ms.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from .config import MAX_DELAY_SECONDS
from .cron import ARM_MARGIN_MS, minute_not_after, minute_not_before, next_minute_after
from .keys import due_second
from .models import RowRejected, Task


class RowState(StrEnum):
    NEW = "new"  # never sent
    IN_FLIGHT = "in_flight"  # sent; its message should still arrive
    ORPHAN = "orphan"  # sent, but still present well after it should have been delivered
    EXHAUSTED = "exhausted"  # orphaned after max attempts: undeliverable


def delay_seconds(due_ms: int, now_ms: int, wake_early_ms: int = 0) -> int:
    """SQS DelaySeconds for a task: 0 when past due, at most 900.

    Rounded up (ceil) towards ``due - wake_early_ms``: the message never becomes
    visible before that instant. With ``wake_early_ms = 0`` it is never visible
    before due; with the default setting (1000 ms) it is visible up to a second
    before due and the consumer waits the last fraction in-process, so delivery
    lands on the millisecond instead of up to a second late (docs/benchmark.md, "What limits each
    number").
    """
    remaining = due_ms - wake_early_ms - now_ms
    if remaining <= 0:
        return 0
    return min(-(-remaining // 1000), MAX_DELAY_SECONDS)


def direct_target_ms(due_ms: int, now_ms: int, early_margin_ms: int, max_wait_ms: int = 1000) -> int:
    """The moment a direct event's send is planned to make it visible (docs/architecture.md, "Direct
    delivery"): its due ms itself when it is under a second away (or past) and the sender waits for
    it (at most ``max_wait_ms``): sent then, it goes with no delay (:func:`direct_delay_seconds`);
    else ``early_margin_ms`` after its due ms, as it will go with DelaySeconds (a phase for that
    target, rather than a send at once with a delay rounded up a second past it)."""
    waited = due_ms - now_ms < 1000 and due_ms - now_ms <= max_wait_ms
    return due_ms if waited else due_ms + early_margin_ms


def direct_delay_seconds(due_ms: int, now_ms: int, early_margin_ms: int) -> int:
    """DelaySeconds of a direct event sent at ``now_ms``: none once it is due (visible when SQS takes
    the call: no timer to be early); else rounded up towards ``early_margin_ms`` after its due ms, so
    that a delay timer up to that much early still never shows it before its due ms."""
    return 0 if due_ms <= now_ms else delay_seconds(due_ms + early_margin_ms, now_ms)


def aligned_send_times(targets: Sequence[int], now_ms: int, step_ms: int,
                       near: bool = False, max_wait_ms: int = 1000) -> list[tuple[int, list[int]]]:
    """When to send messages so that whole seconds of DelaySeconds make each one visible at its
    target (``targets[i]``, epoch ms) or at most ``step_ms`` after it (docs/architecture.md,
    "Sends aligned to the due ms"): (send at, the indexes sent then), earliest first.

    Message i's phase is the moment in [now, now + 1 s) a whole number of seconds before its
    target. Messages whose phases lie within ``step_ms`` of the first of them share a send, made
    at the last of those phases: sent before its phase, a message's DelaySeconds (rounded up)
    would make it visible nearly a second after its target. A target less than a second away has
    no phase here: it is not in the plan (sent at once); with ``near``, its phase is the target
    itself (``now`` when past), where it is sent with no delay (direct delivery).

    ``max_wait_ms``: a message whose phase is further than that from now is not waited for: it is
    sent at now, visible up to a second after its target, less than ``1000 - max_wait_ms`` after it
    (direct delivery's knob between a sender's billed wait and lateness), unless its target is more
    than 900 s away, out of DelaySeconds' reach from now: its phase is then waited for, and one 901 s
    or more away is sent 900 s before it, a second or more after now (direct delivery's early margin
    puts a task due at the window's end there)."""
    if step_ms < 1:
        raise ValueError(f"step_ms must be >= 1, got {step_ms}")
    phased = sorted((_phase(t, now_ms), i) for i, t in enumerate(targets) if near or t - now_ms >= 1000)
    reach_ms = MAX_DELAY_SECONDS * 1000  # the furthest target a send now can still reach
    phased = sorted((at if at - now_ms <= max_wait_ms or targets[i] - now_ms > reach_ms else now_ms, i)
                    for at, i in phased)
    plan: list[tuple[int, list[int]]] = []
    first = 0
    for at, i in phased:
        if plan and at < first + step_ms:
            plan[-1] = (at, plan[-1][1] + [i])
        else:
            first = at
            plan.append((at, [i]))
    return plan


def _phase(target_ms: int, now_ms: int) -> int:
    """The moment in [now, now + 1 s) a whole number of seconds before ``target_ms`` (the target
    itself, or now, when it is less than a second away); 900 s before it when it is further than
    the longest DelaySeconds can reach from that moment."""
    if target_ms - now_ms < 1000:
        return max(target_ms, now_ms)
    return max(now_ms + (target_ms - now_ms) % 1000, target_ms - MAX_DELAY_SECONDS * 1000)


def visible_at(task: Task) -> int:
    """When the task's current message should become visible."""
    if task.enqueued_ms is None:
        return task.due_ms
    return max(task.due_ms, task.enqueued_ms)


# A send mark later than this after "now" was not written by Punctual (it writes its clock's
# now); trusting it would keep the row "in flight" until that far future: resend it instead.
MAX_MARK_SKEW_MS = 60_000


# The editor's claim token for a row it sends from a stream record: the record's sequence number
# (Lambda's retry of the batch carries the same records: docs/architecture.md "claim tokens").
STREAM_TOKEN_PREFIX = "stream:"


def stream_claim_token(sequence_number: str) -> str:
    return f"{STREAM_TOKEN_PREFIX}{sequence_number}"


def given_up_batch(start: str, end: str) -> str | None:
    """A stream batch Lambda gave up on (its OnFailure record's first and last sequence numbers) as
    the meta row keeps it, ``"<start>-<end>"``; None when they are not sequence numbers."""
    if not (start.isdigit() and end.isdigit()) or int(start) > int(end):
        return None
    return f"{int(start)}-{int(end)}"


@dataclass(frozen=True)
class DeadClaims:
    """Claims whose work died: rows claimed with them are finished by whoever knows it
    (:func:`row_state`, store.claim). ``tokens``: an earlier attempt of this poll, the poll whose
    lease this one took over; ``stream_batches``: stream batches Lambda gave up on
    (:func:`given_up_batch`), whose records' tokens are their sequence numbers."""

    tokens: frozenset[str] = frozenset()
    stream_batches: frozenset[str] = frozenset()
    # the batches' sequence-number ranges, read once (a poll asks for every row it reads); an entry
    # that is not "<start>-<end>" names no claim
    _ranges: tuple[tuple[int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ranges = (b.split("-") for b in self.stream_batches)
        object.__setattr__(self, "_ranges", tuple(
            (int(r[0]), int(r[1])) for r in ranges if len(r) == 2 and r[0].isdigit() and r[1].isdigit()))

    def __contains__(self, token: object) -> bool:
        if not isinstance(token, str):
            return False
        if token in self.tokens:
            return True
        seq = token.removeprefix(STREAM_TOKEN_PREFIX)
        if seq == token or not seq.isdigit() or not self._ranges:
            return False
        n = int(seq)
        return any(lo <= n <= hi for lo, hi in self._ranges)


def claimed_by_dead_work(task: Task, died: Container[str]) -> bool:
    """Whether ``task`` is still claimed by work of ``died`` (:class:`DeadClaims`)."""
    return task.claim_token is not None and task.claim_token in died


# A row whose claims were taken over from dead work this many times is rejected as undeliverable
# instead: takeovers add no attempt (store.claim), and a row that made every poll die after its
# claim would otherwise stall the schedule for good. A poller dying after every claim for 60
# minutes took a row's claim over 20 times (tests/reliability/test_outages.py): 30 keeps the hour
# invariant 2 covers, and ends a poison row's stall in ~1.5 h (tests/reliability/test_poison_row.py).
MAX_TAKEOVERS = 30


def row_state(task: Task, now_ms: int, orphan_grace_ms: int, max_attempts: int,
              died: Container[str] = ()) -> RowState:
    """``died``: tokens of work that died holding claims (:class:`DeadClaims`): an earlier attempt of
    this very poll (Lambda retries an invocation only after it failed), a poll whose lease this one
    took over, a stream batch given up on. A row claimed with one may not have been sent: an orphan at
    once, not after the grace, and not exhausted by its attempts: its claim is taken over with its
    count (store.claim), so the crash used no attempt; only after :data:`MAX_TAKEOVERS` of those.

    A row whose due second is fenced (a delivery of that second began, store.fence_second) gets no
    longer grace: the fence does not say which rows were delivered, and a row whose pointer was lost
    must not wait for a delivery that is not coming (docs/architecture.md, "Cancellation never
    lies"). A delivered row whose delete is held past the grace (repeated consumer crashes, a lost
    delete-only copy) is sent again: one duplicate after such an event (invariant 5)."""
    if task.enqueued_ms is None:
        # A released row (its send failed for good) is new again, but only until it has
        # used up its attempts: otherwise a permanent send failure would loop forever.
        return RowState.EXHAUSTED if task.attempt >= max_attempts else RowState.NEW
    if claimed_by_dead_work(task, died):
        return RowState.EXHAUSTED if task.takeovers >= MAX_TAKEOVERS else RowState.ORPHAN
    if task.enqueued_ms > now_ms + MAX_MARK_SKEW_MS:
        return RowState.EXHAUSTED if task.attempt >= max_attempts else RowState.ORPHAN
    if now_ms <= orphan_check_of(task, orphan_grace_ms):
        return RowState.IN_FLIGHT
    if task.attempt >= max_attempts:
        return RowState.EXHAUSTED
    return RowState.ORPHAN


def undeliverable(task: Task) -> RowRejected:
    """Why a row whose sends are used up is rejected (the same words from the poller and the editor)."""
    if task.takeovers >= MAX_TAKEOVERS:
        return RowRejected("undeliverable", f"still pending after {task.attempt} sends and {task.takeovers} "
                           "claims whose work died (a row that kills whoever sends it?)")
    return RowRejected("undeliverable", f"still pending after {task.attempt} sends")


@dataclass(frozen=True)
class Send:
    task: Task
    delay_seconds: int
    resend: bool = False  # an orphan: sent before, still present past its grace


@dataclass
class WindowPlan:
    sends: list[Send] = field(default_factory=list)
    exhausted: list[Task] = field(default_factory=list)
    in_flight: int = 0
    # Latest time a poll must follow to find orphans among rows of this window.
    orphan_check_ms: int | None = None


def plan_window(
    now_ms: int,
    tasks: Iterable[Task],
    window_ms: int,
    orphan_grace_ms: int,
    max_attempts: int,
    wake_early_ms: int = 0,
    died: Container[str] = (),
) -> WindowPlan:
    """Plan a poll at ``now_ms`` over rows read up to ``now_ms + window_ms``.

    New rows and orphans due within the window are sent (past-due rows count);
    rows beyond the window are ignored (the next poll takes them). ``died``: see row_state.
    """
    if not 0 < window_ms <= MAX_DELAY_SECONDS * 1000:
        raise ValueError(f"window must be 1..{MAX_DELAY_SECONDS * 1000} ms, got {window_ms}")
    end = now_ms + window_ms
    plan = WindowPlan()
    checks: list[int] = []
    for task in tasks:
        if task.due_ms > end:
            continue
        state = row_state(task, now_ms, orphan_grace_ms, max_attempts, died)
        if state in (RowState.NEW, RowState.ORPHAN):
            # a row claimed by work that died is resent now, not deferred behind a backlog (its
            # message was most likely never sent)
            reclaimed = claimed_by_dead_work(task, died)
            plan.sends.append(Send(task, delay_seconds(task.due_ms, now_ms, wake_early_ms),
                                   resend=state is RowState.ORPHAN and not reclaimed))
            checks.append(max(task.due_ms, now_ms) + orphan_grace_ms)
        elif state is RowState.IN_FLIGHT:
            plan.in_flight += 1
            checks.append(orphan_check_of(task, orphan_grace_ms))
        else:
            plan.exhausted.append(task)
    plan.sends.sort(key=lambda s: s.task.sk)
    plan.orphan_check_ms = max(checks) if checks else None
    return plan


def orphan_check_of(task: Task, orphan_grace_ms: int) -> int:
    """When a row in flight becomes an orphan if it is still there: a poll must follow then."""
    return visible_at(task) + orphan_grace_ms


def _sent_before(task: Task) -> bool:
    return task.enqueued_ms is not None


def orphan_count(plan: WindowPlan) -> int:
    """Rows this plan takes for lost messages: resends, and sent rows about to be rejected as
    undeliverable (a released row, never sent again, is not an orphan)."""
    return sum(1 for send in plan.sends if send.resend) + sum(1 for t in plan.exhausted if _sent_before(t))


def defer_orphans(plan: WindowPlan, now_ms: int, orphan_grace_ms: int) -> WindowPlan:
    """The plan with its orphans kept in flight for another grace instead of resent or rejected.

    For when the delay queue holds at least as many visible messages as there are orphans: the
    consumer is behind (a burst, a throttled or capped consumer), and the orphans' messages are
    most likely waiting in that backlog, not lost. Resending them would add a second message per
    row to the backlog and use up their attempts until they were rejected as undeliverable while
    their first message was still on its way. A poll still follows after the grace.
    """
    deferred = orphan_count(plan)
    if not deferred:
        return plan
    checks = [c for c in (plan.orphan_check_ms, now_ms + orphan_grace_ms) if c is not None]
    return WindowPlan(
        sends=[send for send in plan.sends if not send.resend],
        exhausted=[t for t in plan.exhausted if not _sent_before(t)],
        in_flight=plan.in_flight + deferred,
        orphan_check_ms=max(checks),
    )


def next_poll_minute(
    now_ms: int,
    next_unsent_due_ms: int | None,
    orphan_check_ms: int | None,
    lead_ms: int,
) -> int | None:
    """Start of the minute to arm the rule for, or None to disable it.

    - an unsent task due at ``d`` needs a poll that starts by ``d - lead``: the
      latest minute starting at or before it (the poll lands inside the minute);
    - rows in flight need a poll after ``orphan_check_ms`` so a lost message is
      found: the first minute starting at or after it.
    Both are clamped to a minute that has not begun.
    """
    candidates = []
    if next_unsent_due_ms is not None:
        candidates.append(minute_not_after(next_unsent_due_ms - lead_ms, now_ms))
    if orphan_check_ms is not None:
        candidates.append(minute_not_before(orphan_check_ms, now_ms))
    return min(candidates) if candidates else None


def safety_net_minute(started_ms: int, orphan_grace_ms: int) -> int:
    """The minute a poll starting at ``started_ms`` arms first, before it reads anything: a poll
    follows even if this one dies (after the orphan grace, so it finds what this one sent)."""
    return minute_not_before(started_ms + orphan_grace_ms, started_ms + ARM_MARGIN_MS)


@dataclass(frozen=True)
class FollowUp:
    """What the next poll must cover once a poll has sent its window: the latest orphan check of
    rows in flight (a poll after it finds a lost message) and the earliest due of rows left unsent
    (a poll by its due - lead sends them)."""

    orphan_check_ms: int | None = None
    unsent_due_ms: int | None = None

    def check_after(self, *checks: int | None) -> FollowUp:
        """Also cover these orphan checks (the latest of all counts)."""
        latest = max((c for c in (self.orphan_check_ms, *checks) if c is not None), default=None)
        return FollowUp(latest, self.unsent_due_ms)

    def unsent_by(self, *dues: int | None) -> FollowUp:
        """Also send rows due at these times (the earliest of all counts)."""
        earliest = min((d for d in (self.unsent_due_ms, *dues) if d is not None), default=None)
        return FollowUp(self.orphan_check_ms, earliest)


def after_send(plan: WindowPlan, skipped_dues: Sequence[int], failed_dues: Sequence[int], now_ms: int,
               orphan_grace_ms: int) -> FollowUp:
    """The follow-up of a window sent by ``plan``: its orphan checks; rows claimed by someone else
    after the poll read them (``skipped_dues``: their sender may die before sending, so a poll
    must follow their grace too); rows whose send failed for good (``failed_dues``: released,
    unsent again)."""
    skipped = max((max(d, now_ms) for d in skipped_dues), default=None)
    follow = FollowUp(plan.orphan_check_ms)
    if skipped is not None:
        follow = follow.check_after(skipped + orphan_grace_ms)
    return follow.unsent_by(*failed_dues)


def minute_after_poll(now_ms: int, follow: FollowUp, next_due_ms: int | None, beyond_check_ms: int | None,
                      lead_ms: int, armed_seen_ms: int | None, armed_now_ms: int | None) -> int | None:
    """The minute a poll arms at its end (None: disable the rule): the earliest an unsent row needs
    (``next_due_ms``: the first unsent row after the window, or ``follow``'s) and after the latest
    orphan check (``follow``'s, or ``beyond_check_ms``: rows after the window already in flight).

    ``armed_now_ms`` differing from ``armed_seen_ms``: someone (an editor) moved the arm since the
    poll read it, maybe for a row the poll cannot see (inside its window): never later than that
    arm (or than the earliest minute still safe to arm). An editor that only bumped the version
    wanted a minute no earlier than the arm seen: its rows lie beyond the window, and
    ``next_due_ms`` (read again) sees them."""
    due = follow.unsent_by(next_due_ms).unsent_due_ms
    check = follow.check_after(beyond_check_ms).orphan_check_ms
    minute = next_poll_minute(now_ms + ARM_MARGIN_MS, due, check, lead_ms)
    if armed_now_ms is not None and armed_now_ms != armed_seen_ms:
        theirs = max(armed_now_ms, next_minute_after(now_ms + ARM_MARGIN_MS))
        minute = theirs if minute is None else min(minute, theirs)
    return minute


# A group (one delay-queue message for many rows, docs/architecture.md "Groups") holds at most
# this many rows, and its body at most this many bytes: SQS bills each 64 KiB of a message as
# one request, and one consumer invocation of 10 messages then holds at most 10,000 rows.
GROUP_MAX_ROWS = 250
GROUP_MAX_BYTES = 64_000
# A group of n rows is made visible (n - 1) x this much earlier than a single row, at most
# GROUP_MAX_EXTRA_WAKE_MS: its consumer is started (a cold start) and has its rows read before the
# first row is due.
GROUP_WAKE_MS_PER_ROW = 2
GROUP_MAX_EXTRA_WAKE_MS = 2000
# Lambda's SQS event source runs 5 consumers at first and adds up to 300 a minute (one every
# 200 ms) while messages wait (Lambda docs, "Configuring scaling behavior for SQS event source
# mappings"); a cluster needing more is made visible early enough for the ramp, plus a cold start.
ESM_INITIAL_CONSUMERS = 5
ESM_MS_PER_CONSUMER = 200
CLUSTER_COLD_START_MS = 1000
# The most any message is made visible before a lone row would be: the consumer waits that long
# in-process, within its 30 s beside max_wait, a group's span and its sends (consume.max_wait_ms).
MAX_EXTRA_WAKE_MS = 12_000


def group_extra_wake_ms(rows: int) -> int:
    return min(GROUP_MAX_EXTRA_WAKE_MS, max(0, rows - 1) * GROUP_WAKE_MS_PER_ROW)


# The most consumers a cluster is made visible early enough for: Lambda's first five and those it
# adds within MAX_EXTRA_WAKE_MS after a cold start (60).
MAX_CLUSTER_CONSUMERS = ESM_INITIAL_CONSUMERS + (MAX_EXTRA_WAKE_MS - CLUSTER_COLD_START_MS) // ESM_MS_PER_CONSUMER


def cluster_rows_per_consumer(cluster_rows: int, max_rows: int) -> int:
    """The rows one consumer delivers of a cluster of ``cluster_rows`` rows due in one second: a
    group's (GROUP_MAX_ROWS) while Lambda can run that many consumers by their due time, else the
    cluster shared over MAX_CLUSTER_CONSUMERS; never more than ``max_rows`` (consumer_max_rows).
    Fewer rows a consumer: less of the consumer's per-row CPU before the last row's send."""
    share = -(-cluster_rows // MAX_CLUSTER_CONSUMERS)
    return max(1, min(max_rows, max(GROUP_MAX_ROWS, share)))


def message_consumer_rows(cluster_rows: int, max_rows: int) -> int:
    """A cluster's message's ``consumer_rows``: its share a consumer when the cluster needs more
    than one consumer and the share is below the consumer's own budget, else 0 (not said)."""
    rows = cluster_rows_per_consumer(cluster_rows, max_rows)
    return rows if rows < min(cluster_rows, max_rows) else 0


def cluster_extra_wake_ms(cluster_rows: int, rows_per_consumer: int) -> int:
    """How much earlier than a lone row the messages of a cluster (``cluster_rows`` rows due in
    one second) are made visible, so that Lambda runs the ceil(cluster_rows / rows_per_consumer)
    consumers they need by their due time instead of starting to scale up then: 0 for one consumer,
    else a cold start (the consumers it is handed to start then) and 200 ms a consumer beyond the
    first five, at most MAX_EXTRA_WAKE_MS."""
    consumers = -(-cluster_rows // max(1, rows_per_consumer))
    if consumers <= 1:
        return 0
    ramp = max(0, consumers - ESM_INITIAL_CONSUMERS) * ESM_MS_PER_CONSUMER + CLUSTER_COLD_START_MS
    return min(MAX_EXTRA_WAKE_MS, ramp)


def extra_wake_ms(group_rows: int, cluster_rows: int, max_rows: int) -> int:
    """How much earlier than a lone row a message of ``group_rows`` rows is made visible when
    ``cluster_rows`` rows (its own among them) are due in its first row's second."""
    per_consumer = cluster_rows_per_consumer(cluster_rows, max_rows)
    return max(group_extra_wake_ms(group_rows), cluster_extra_wake_ms(cluster_rows, per_consumer))


def rows_per_second(dues: Iterable[int]) -> dict[int, int]:
    """How many of ``dues`` fall in each second (keyed by the second's first ms)."""
    out: dict[int, int] = {}
    for due in dues:
        second = due_second(due)
        out[second] = out.get(second, 0) + 1
    return out


def group_by_due(
    dues: Sequence[int],
    sizes: Sequence[int],
    span_ms: int,
    max_rows: int = GROUP_MAX_ROWS,
    max_bytes: int = GROUP_MAX_BYTES,
) -> list[range]:
    """Split rows sorted by due into consecutive groups, as index ranges: a group takes the
    next row while it is due within ``span_ms`` of the group's first row and the group stays
    within ``max_rows`` rows and ``max_bytes`` of pointer bytes (``sizes``). A row alone
    always makes a group, whatever its size."""
    if len(dues) != len(sizes):
        raise ValueError("dues and sizes differ in length")
    out: list[range] = []
    start, used = 0, 0
    for i, (due, size) in enumerate(zip(dues, sizes, strict=True)):
        if i > start and (due - dues[start] > span_ms or i - start >= max_rows or used + size > max_bytes):
            out.append(range(start, i))
            start, used = i, 0
        used += size
    if dues:
        out.append(range(start, len(dues)))
    return out
