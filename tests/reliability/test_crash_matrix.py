"""Crash poller, consumer and editor at every AWS call of a representative run (invariants 2 and 5, docs/architecture.md).

Normal suite: the in-memory fake (every crash point of the three handlers, < 5 s).
``make test-long``: the same matrix over moto. Print it with ``pytest -rA`` or
``python -m tests.reliability.matrix [--moto]`` (docs/reliability.md has a copy).
"""

from __future__ import annotations

import pytest

from punctual.core.config import Settings
from tests.reliability.crashes import ROWS, TARGETS, check, format_matrix, loss_matrix, matrix
from tests.virtual_aws import VISIBILITY_TIMEOUT_MS


def _run(target: str, backend: str, settings: Settings | None = None) -> None:
    cases = matrix(target, backend, failures=True, settings=settings)
    print(f"\n{target} ({backend}): {len(cases) - 1} crash / failure points")
    print(format_matrix(cases))
    assert len(cases) > 4, "the clean run made almost no AWS calls: scenario broken"
    clean = cases[0]
    assert clean.outcome.duplicates == 0 and not check(clean), check(clean)
    # the twins travel in groups: fewer delay-queue messages than rows (else groups go untested)
    assert clean.outcome.__dict__["delay_messages"] < len(ROWS)
    bad = {str(c.point): check(c) for c in cases if check(c)}
    assert not bad, bad
    # issue 11: after any single crash of any handler, at most 6 min late. A retry of the crashed
    # work (the same token) finishes what it claimed: the poller's async retry (1 min), the
    # stream's batch retry, the consumer's redelivery (its visibility timeout)
    bound = CRASH_BOUND_MS[target]
    late = {str(c.point): c.outcome.max_lateness_ms for c in cases if c.outcome.max_lateness_ms > bound}
    assert not late, late


# The poller's async retry comes after 60 s, the editor's batch retry at once; a consumer batch that
# crashed (or failed) comes back after the delay queue's visibility timeout, 180 s as the construct
# sets it (AWS's 6 x the function timeout): nothing else a crash leads to may take longer here.
CRASH_BOUND_MS = {"poller": 60_000 + 5_000, "editor": 60_000 + 5_000, "consumer": VISIBILITY_TIMEOUT_MS + 5_000}


@pytest.mark.parametrize("target", TARGETS)
def test_crash_matrix(target):
    _run(target, "fake")


@pytest.mark.parametrize("target", TARGETS)
def test_crash_matrix_with_two_shards(target):
    """shards=2 (docs/architecture.md, "Shards"): the scenario's rows fall in both shards (a group
    of twins is split between them, the bad row in one), the same invariants and bound hold."""
    s = Settings(send_workers=1, shards=2)
    assert {s.partition_for(name) for name in ROWS} == {"scheduler#0", "scheduler#1"}
    _run(target, "fake", s)


@pytest.mark.parametrize("target", TARGETS)
def test_crash_matrix_without_a_fast_path(target):
    """fast_path_seconds=0: the editor leaves rows a poll can still reach (the +14 min ones here)
    to a poll; the same invariants and bound hold."""
    _run(target, "fake", Settings(send_workers=1, fast_path_seconds=0))


@pytest.mark.parametrize("target", ["poller", "editor"])
def test_crash_matrix_in_direct_delivery(target):
    """delivery="direct" (docs/architecture.md, "Direct delivery"): the poller and the editor send
    the events themselves (the consumer has no part in it); the same invariants and bound hold: a
    crash is finished by the retry of the crashed work, a duplicate only after a crash."""
    _run(target, "fake", Settings(send_workers=1, delivery="direct"))


@pytest.mark.long
@pytest.mark.parametrize("target", TARGETS)
def test_crash_matrix_moto(target):
    _run(target, "moto")


def test_lost_delay_messages_are_recovered():
    """Invariant 2: an SQS message lost is found as an orphan by a later poll (late, not lost)."""
    cases = loss_matrix()
    print("\nlost delay-queue messages")
    print(format_matrix(cases))
    assert len(cases) >= 4
    bad = {str(c.point): check(c) for c in cases if check(c)}
    assert not bad, bad
