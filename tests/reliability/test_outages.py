"""Invariant 2 under outages in time (docs/architecture.md, "When arming fails"; docs/reliability.md,
"Outages"): one service failing (DynamoDB reads, writes or both, the delay or the delivery queue,
EventBridge's control plane), one function throttled, or the poller or the editor dying right after
each of its claims, for 1 to 60 minutes, starting at a poll or
between polls, with every error kind that applies (a 500, throttling, a 200 whose every entry
failed). After each: nothing lost or early, no valid row rejected, a task due after the recovery
plus the lead on time, any other within 2 minutes of the later of its due time and the recovery,
at most one duplicate of a row (tests/reliability/outages.py ``problems``).

Normal suite: the in-memory AWS, every case (~20 s in all). ``make test-long``: a sample over moto.
Print the table with ``python -m tests.reliability.outages --kinds``.
"""

from __future__ import annotations

import pytest

from punctual.core.config import Settings
from tests.reliability.outages import (
    CRASHING,
    KINDS,
    LENGTHS_MIN,
    SERVICES,
    THROTTLED,
    outage_table,
    problems,
    run_outage,
)


def _cases(services: list[str]) -> list:
    return [
        pytest.param(phase, service, kind, minutes, id=f"{service}-{kind}-{minutes}min-{phase}".replace(" ", "_"))
        for phase in ("at a poll", "between polls")
        for service in services
        for kind in KINDS.get(service, ("5xx",))
        for minutes in LENGTHS_MIN
    ]


EVERY = list(SERVICES) + list(THROTTLED) + list(CRASHING)
# what each mode deploys: the delay queue and the consumer, or (direct delivery) the control topic
CASES = _cases([s for s in EVERY if s != "control topic"])
DIRECT_CASES = _cases([s for s in EVERY if s not in ("delay queue", "consumer throttled")])


@pytest.mark.parametrize(("phase", "service", "kind", "minutes"), CASES)
def test_every_pending_task_is_delivered_soon_after_the_outage(phase, service, kind, minutes):
    case = run_outage(service, minutes, kind, phase=phase)
    print("\n" + outage_table([case]))
    assert len(case.outcome.expected) >= 10, "scenario broken"
    # "at a poll" the dying function meets the fault (between polls, a short one may pass unseen)
    assert service not in CRASHING or phase != "at a poll" or case.crashes > 0, "the function never died"
    assert problems(case) == [], (problems(case), case.errors[:3])


@pytest.mark.parametrize(("phase", "service", "kind", "minutes"), DIRECT_CASES)
def test_every_pending_task_is_delivered_soon_after_the_outage_in_direct_delivery(phase, service, kind, minutes):
    """The same outages in direct delivery (docs/architecture.md, "Direct delivery"): the poller and
    the editor send the events; a send SQS refuses releases its claim, and the rows wait for a poll;
    a poll that cannot arm asks for one through the control topic, which invokes the poller (no
    delay queue, no consumer); the topic's own outage is among the cases."""
    case = run_outage(service, minutes, kind, phase=phase, settings=Settings(send_workers=1, delivery="direct"))
    assert len(case.outcome.expected) >= 10, "scenario broken"
    assert problems(case) == [], (problems(case), case.errors[:3])


@pytest.mark.parametrize("phase", ["at a poll", "between polls"])
@pytest.mark.parametrize("service", ["dynamodb writes", "dynamodb"])
@pytest.mark.parametrize("minutes", [5, 30])
def test_a_row_written_just_after_the_table_recovers_does_not_move_the_pending_poll_away(service, minutes, phase):
    """While the table refuses writes the consumer arms the rule alone for the failed poll; the meta
    row still names the minute that fired. An editor arming for a row due hours later, a second after
    the recovery, synced the rule from the meta row to that row's minute: the rows the failed poll
    left waited for it (30 min: 10,450 s after the recovery). Now the consumer asks again every 20 s
    until the meta row holds the poll too."""
    case = run_outage(service, minutes, phase=phase, insert_after_ms=1_000)
    assert problems(case) == [], (problems(case), case.errors[:3])


def test_an_outage_during_a_poll_is_noticed_and_survived():
    """Sanity for the matrix: the outage really meets the functions (the poll fails at its first
    write), and the schedule still goes on: the rows due 75 min and 2 h ahead, after the recovery,
    are delivered on time."""
    case = run_outage("dynamodb writes", 5, phase="at a poll")
    assert any(e.startswith("poller:") for e in case.errors), case.errors  # a poll did fail
    late = {d.key: d.sent_ms - case.outcome.expected[d.key] for d in case.outcome.deliveries}
    assert all(ms < 1_000 for key, ms in late.items() if key.endswith(("#in-75m", "#in-2h")))
    assert problems(case) == []


@pytest.mark.long
@pytest.mark.parametrize(("service", "minutes"), [("dynamodb writes", 5), ("dynamodb reads", 30), ("eventbridge", 30),
                                                  ("delay queue", 5), ("delivery queue", 30),
                                                  ("poller throttled", 30), ("consumer throttled", 5)])
def test_outages_over_moto(service, minutes):
    case = run_outage(service, minutes, backend="moto")
    assert problems(case) == [], problems(case)
