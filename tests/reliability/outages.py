"""Outages in time: one AWS service (or one function's invocations) failing between two virtual
times, and what it costs the tasks (invariant 2, docs/reliability.md "Outages").

A scenario (:data:`ROWS`: past due, due in seconds, in the window, beyond it, hours ahead; rows
inserted during the outage too, unless the table refuses writes) runs over the in-memory AWS (or
moto) in virtual time; from ``OUTAGE_START`` for the given length one service fails as the error
kind says (tests/faults.py ``Outage``: a 500, throttling, or a 200 whose every entry failed), or
Lambda refuses one function's invocations. Every function has clients of its own: the harness's
own calls (the event sources' receives, the test's reads) are not hit, but for the delay queue's
receives, which fail with it.

The promise checked (:func:`problems`): nothing lost or early, no valid row rejected, a task due
after the recovery plus the lead delivered on time (within ``ON_TIME_MS``), any other within 2
minutes of the later of its due time and the recovery, and no more than one duplicate per row.
``python -m tests.reliability.outages [--moto] [--kinds]`` prints the table.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from punctual.bench.outages import SERVICES, service_outage
from punctual.core import observability as obs
from punctual.core.config import Settings
from punctual.core.keys import encode_sk
from tests.faults import Faults, InjectedCrash
from tests.reliability.crashes import START, environment, put_row
from tests.virtual_aws import FUNCTIONS, Outcome, VirtualAws

MINUTE = 60_000
OUTAGE_START = START + 30_000  # after the first poll and the editor's work on the inserts
LENGTHS_MIN = (1, 5, 30, 60)
AFTER_RECOVERY_MS = 2 * MINUTE  # the promise for a task due before the recovery (+ lead)
ON_TIME_MS = 1_000  # "on time" here: the handlers' own lateness in virtual time is a few ms
ROWS = {
    "past": START - 3_600_000,
    "soon": START + 20_000,
    "in-2m": START + 2 * MINUTE,
    "in-6m": START + 6 * MINUTE,
    "in-14m": START + 14 * MINUTE,
    "in-14m-twin": START + 14 * MINUTE + 300,
    "in-20m": START + 20 * MINUTE,
    "in-45m": START + 45 * MINUTE,
    "in-75m": START + 75 * MINUTE,
    "in-2h": START + 120 * MINUTE,
}
# written by a producer 30 s into the outage (not when the outage is the table's writes):
# due (ms after the insert)
DURING = {"during-soon": 10_000, "during-10m": 10 * MINUTE, "during-40m": 40 * MINUTE}

THROTTLED = {f"{fn} throttled": fn for fn in ("poller", "consumer", "editor")}
# A function that dies right after each claim it writes (store.claim), from the start to the end: a
# poll or a stream batch that times out mid-work, again and again (a slow dependency). Lambda's
# retries and the next polls meet it too.
CRASHING = {f"{fn} dies after its claims": fn for fn in ("poller", "editor")}
# which error kinds make a difference for a service (a 200 with failed entries only exists for
# the batch APIs: the queues' SendMessageBatch, the table's BatchWriteItem)
KINDS = {name: ("5xx", "throttle") for name in SERVICES} | {
    "dynamodb writes": ("5xx", "throttle", "failed_entries"),
    "delay queue": ("5xx", "throttle", "failed_entries"),
    "delivery queue": ("5xx", "throttle", "failed_entries"),
}


@dataclass
class OutageCase:
    service: str
    kind: str
    length_min: int
    outcome: Outcome
    rejected: list[dict[str, Any]]
    recovered_ms: int
    lead_ms: int
    dead_letters: int
    errors: list[str]
    crashes: int = 0  # invocations that died (InjectedCrash)
    # direct delivery's early margin: its timed events are planned that much after due (on time too)
    margin_ms: int = 0

    @property
    def rejected_valid(self) -> int:
        return len(self.rejected)

    def late_after_recovery_ms(self) -> int:
        """The latest first delivery, measured from the later of its due time and the recovery."""
        worst = 0
        for key, deliveries in self.outcome.by_key.items():
            first = min(d.sent_ms for d in deliveries)
            due = self.outcome.expected.get(key)
            if due is not None:
                worst = max(worst, first - max(due, self.recovered_ms, self.outcome.ready.get(key, 0)))
        return worst

    def late_on_time_rows_ms(self) -> int:
        """The latest of the rows due after the recovery plus the lead: they must be on time."""
        worst = 0
        for key, deliveries in self.outcome.by_key.items():
            due = self.outcome.expected.get(key)
            if due is not None and due - self.lead_ms >= self.recovered_ms:
                worst = max(worst, min(d.sent_ms for d in deliveries) - due)
        return worst

    def max_duplicates(self) -> int:
        return max((len(v) - 1 for v in self.outcome.by_key.values()), default=0)


def problems(case: OutageCase) -> list[str]:
    """How ``case`` breaks the promise (empty when it keeps it)."""
    out = case.outcome.violations()
    if case.rejected_valid:
        out.append(f"valid rows rejected {case.rejected_valid}")
    if case.late_after_recovery_ms() > AFTER_RECOVERY_MS:
        out.append(f"{case.late_after_recovery_ms() / 1000:.0f} s late after the recovery")
    if case.late_on_time_rows_ms() > ON_TIME_MS + case.margin_ms:
        out.append(f"a row due after the recovery {case.late_on_time_rows_ms() / 1000:.1f} s late")
    if case.max_duplicates() > 1:
        out.append(f"{case.max_duplicates()} duplicates of one row")
    return out


@contextmanager
def _quiet() -> Iterator[io.StringIO]:
    log = io.StringIO()
    obs.set_stream(log)
    try:
        yield log
    finally:
        obs.set_stream(None)


def run_outage(service: str, length_min: int, kind: str = "5xx", backend: str = "fake",
               settings: Settings | None = None, horizon_ms: int = 4 * 3_600_000,
               phase: str = "at a poll", insert_after_ms: int | None = None) -> OutageCase:
    """The scenario with ``service`` out for ``length_min`` minutes. ``phase``: the outage starts
    10 s before the second poll is due to fire ("at a poll": the poll and its retries meet it), or
    30 s after the first one ("between polls"). ``insert_after_ms``: a row due 3 hours later is
    written that long after the recovery (an editor then arms the rule for it)."""
    with _quiet(), environment(backend, settings) as (world, _):
        s = world.deps.settings
        expected: dict[str, int] = {}
        ready: dict[str, int] = {}
        for name, due in ROWS.items():
            sk = encode_sk(due, name)
            put_row(world, sk, {"task": name})
            expected[sk], ready[sk] = due, max(due, START)
        world.run_poller()
        world.run_until(START + 1_000)
        armed = world.armed_minute()
        start = armed + world.fire_offset_ms - 10_000 if phase == "at a poll" and armed else OUTAGE_START
        end = start + length_min * MINUTE
        _start_outage(world, service, kind, start, end)
        world.run_until(start + 30_000)
        if service not in ("dynamodb writes", "dynamodb"):
            for name, after in DURING.items():
                sk = encode_sk(world.now + after, name)
                put_row(world, sk, {"task": name})
                expected[sk], ready[sk] = world.now + after, world.now + after
        if insert_after_ms is not None:
            world.run_until(end + insert_after_ms)
            sk = encode_sk(world.now + 3 * 3_600_000, "hours-after-recovery")
            put_row(world, sk, {"task": "hours-after-recovery"})
            expected[sk] = ready[sk] = world.now + 3 * 3_600_000
        world.run_until(end + horizon_ms, stop=lambda: world.now > end and world.idle())
        valid_rejected = [r for r in world.log.rejected if r.get("sk") in expected]
        return OutageCase(service, "-" if service in THROTTLED or service in CRASHING else kind, length_min, world.outcome(expected, ready=ready), valid_rejected, end,
                          s.lead_ms, len(world.log.dead_letters), list(world.log.errors),
                          len(world.log.crashes), s.direct_early_margin_ms if s.direct else 0)


def _start_outage(world: VirtualAws, service: str, kind: str, start: int, end: int) -> None:
    if service in THROTTLED:
        world.throttle(THROTTLED[service], start, end)
        return
    if service in CRASHING:
        crash_after_claims(world, CRASHING[service], start, end)
        return
    outage = service_outage(service, start, end, {"delay": world.s.delay_queue_url,
                                                  "delivery": world.s.delivery_queue_url}, kind)
    for fn in FUNCTIONS:
        deps = world.isolate(fn)
        Faults(deps.ddb, deps.sqs, deps.events, *((deps.sns,) if deps.sns else ())).outage(
            outage, world.deps.clock.now_ms)
    if outage.queue_url == world.s.delay_queue_url:
        world.queue_outages.append((start, end))


def crash_after_claims(world: VirtualAws, fn: str, start: int, end: int, sk: str | None = None) -> None:
    """``fn`` dies right after each claim (a row's send mark written, store.claim) from ``start`` to
    ``end``; with ``sk``, only after a claim of that row."""
    deps = world.isolate(fn)
    clock = world.deps.clock

    def after(model: Any, context: Any = None, **_: Any) -> None:
        params = (context or {}).get("punctual_params") or {}
        is_claim = model.name == "UpdateItem" and str(params.get("UpdateExpression", "")).startswith("SET #e = :now")
        if is_claim and start <= clock.now_ms() < end and sk in (None, params.get("Key", {}).get("sk", {}).get("S")):
            raise InjectedCrash(f"{fn} dies after a claim")

    Faults(deps.ddb)  # keeps each call's parameters in its context (punctual_params)
    deps.ddb.meta.events.register("after-call.dynamodb", after)


def outage_table(cases: list[OutageCase]) -> str:
    head = ("| outage | kind | minutes | lost | early | valid rejected | max dup | max late after recovery (s) "
            "| max late, rows due after recovery + lead (ms) | delay DLQ | promise |")
    lines = [head, "|" + "---|" * 11]
    for c in cases:
        bad = problems(c)
        lines.append(
            f"| {c.service} | {c.kind} | {c.length_min} | {len(c.outcome.lost)} | {len(c.outcome.early)} "
            f"| {c.rejected_valid} | {c.max_duplicates()} | {c.late_after_recovery_ms() / 1000:.0f} "
            f"| {c.late_on_time_rows_ms()} | {c.dead_letters} | {'kept' if not bad else '; '.join(bad)} |")
    return "\n".join(lines)


def all_cases(backend: str = "fake", every_kind: bool = False,
              lengths: tuple[int, ...] = LENGTHS_MIN) -> list[OutageCase]:
    cases = []
    for service in list(SERVICES) + list(THROTTLED) + list(CRASHING):
        kinds = KINDS.get(service, ("-",)) if every_kind else KINDS.get(service, ("-",))[:1]
        for kind in kinds:
            for minutes in lengths:
                cases.append(run_outage(service, minutes, "5xx" if kind == "-" else kind, backend))
    return cases


def main() -> None:
    import sys

    args = sys.argv[1:]
    backend = "moto" if "--moto" in args else "fake"
    print(f"outages ({backend}): the scenario's rows due -1 h .. +2 h, three more written 30 s into the outage")
    print(outage_table(all_cases(backend, every_kind="--kinds" in args)))


if __name__ == "__main__":
    main()
