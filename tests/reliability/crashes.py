"""Crash matrix: crash poller, consumer or editor at every point of a representative run.

For a target handler, a clean run records the AWS calls its first invocation makes
(:class:`tests.faults.Faults`); then, for each call, a fresh moto stack runs the same
scenario with the process dying right before / right after that call, and the
world (:mod:`tests.virtual_aws`) recovers as AWS would: async retries of the
poller, redelivery of the consumer's batch after the visibility timeout, stream
batch retries for the editor, and the rule firing the next polls (orphan check).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from punctual.core import observability as obs
from punctual.core.config import Settings
from punctual.core.keys import encode_sk
from punctual.core.models import PollRequest
from punctual.core.retry import seed_jitter
from tests.faults import CrashPoint, Faults, crash_points, fail_points
from tests.virtual_aws import Outcome, VirtualAws

T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z
START = T0 + 10_000
HORIZON = START + 2 * 3_600_000
TARGETS = ("poller", "consumer", "editor")
JITTER_SEED = 20_270_101

# the representative scenario: past due, due in seconds, inside the window, beyond it, plus one bad
# row; "window" and "beyond" each have twins due within group_span_ms, so they travel as groups
# (one delay-queue message with several row pointers, docs/architecture.md "Groups")
ROWS = {
    "past": T0 - 3_600_000,
    "soon": START + 5_000,
    "window": START + 14 * 60_000,
    "window-twin": START + 14 * 60_000,
    "window-late": START + 14 * 60_000 + 600,
    "beyond": START + 16 * 60_000,
    "beyond-twin": START + 16 * 60_000 + 1,
}
BAD_SK = "2027-01-01T00:20:00Z#iso-is-not-ms"


@dataclass
class Case:
    target: str
    point: CrashPoint | None
    outcome: Outcome
    trace: list[str]
    fired: list[str]


def _targeted(fn: Callable[..., Any], faults: Faults) -> Callable[..., Any]:
    """Run ``fn`` with faults active in every invocation: call counts run across invocations,
    so "the nth call of op" is a point anywhere in the target's whole life in the scenario."""

    def run(*args: Any) -> Any:
        with faults.active(reset=False):
            return fn(*args)

    return run


CONTROL_TOPIC = "arn:aws:sns:us-east-1:123456789012:punctual-control"


@contextmanager
def environment(backend: str, settings: Settings | None = None, start_ms: int = START,
                fire_offset_ms: int = 5_000) -> Iterator[tuple[VirtualAws, tuple[Any, ...]]]:
    """A fresh Punctual stack at ``start_ms``: ("fake") in memory, or ("moto") moto + freezegun. The
    retries' jitter is seeded: a case reads the same figures in every run (it read 11 s or 70 s after
    a recovery from one run to the next)."""
    seed_jitter(JITTER_SEED)
    base = settings or Settings(send_workers=1)
    if backend == "fake":
        from punctual.core.clock import ManualClock
        from punctual.core.runtime import Deps
        from tests.reliability.fakeaws import GatedAws

        clock = ManualClock(start_ms)
        aws = GatedAws(clock)
        s = replace(base, delay_queue_url="q/delay", delivery_queue_url="q/delivery",
                    rejected_queue_url="q/rejected")
        if s.direct:  # no delay queue: the control topic (docs/architecture.md, "Direct delivery")
            s = replace(s, delay_queue_url="", control_topic_arn=CONTROL_TOPIC)
        deps = Deps(s, clock, aws.ddb, aws.sqs, aws.events, sns=aws.sns if s.direct else None)
        yield (VirtualAws.over_fake(deps, aws, clock, fire_offset_ms=fire_offset_ms),
               (aws.ddb, aws.sqs, aws.events, *((aws.sns,) if s.direct else ())))
        return
    from freezegun import freeze_time
    from moto import mock_aws

    from tests.support import FreezegunClock, make_stack

    with freeze_time(datetime.fromtimestamp(start_ms / 1000, tz=UTC)) as frozen, mock_aws():
        stack = make_stack(base, clock=FreezegunClock(frozen))
        world = VirtualAws.over_moto(stack, frozen, fire_offset_ms=fire_offset_ms, step_ms=1,
                                     receive_latency_ms=0)
        yield world, (stack.ddb, stack.sqs, stack.events, *((stack.deps.sns,) if stack.deps.sns else ()))


def put_row(world: VirtualAws, sk: str, payload: dict[str, str]) -> None:
    s = world.deps.settings
    world.deps.ddb.put_item(TableName=s.table_name, Item={
        "pk": {"S": s.partition_for_key(sk)}, "sk": {"S": sk},
        "payload": {"M": {k: {"S": v} for k, v in payload.items()}}})


def run_case(target: str, point: CrashPoint | None, backend: str = "fake",
             settings: Settings | None = None) -> Case:
    assert target in TARGETS
    log = io.StringIO()
    obs.set_stream(log)
    try:
        with environment(backend, settings) as (world, clients):
            faults = Faults(*clients, enabled=False)
            if point is not None and point.when == "lose":
                world.lose = {point.nth}
                faults.fired.append(f"lost delay message #{point.nth}")
            elif point is not None:
                faults.crash_at(point)
            setattr(world, target, _targeted(getattr(world, target), faults))
            expected = {}
            for name, due in ROWS.items():
                sk = encode_sk(due, name)
                put_row(world, sk, {"task": name, "secret": "s3cr3t-" + name})
                expected[sk] = due
            put_row(world, BAD_SK, {"task": "bad"})
            ready = {sk: max(due, START) for sk, due in expected.items()}
            if target != "editor":
                world.skip_stream()  # the inserts' stream records: not the subject here
                world.run_poller()  # as if the rule fired now (crashes here when target == "poller")
            world.run_until(HORIZON, stop=world.idle)
            out = world.outcome(expected, ready=ready)
            out.__dict__["delay_messages"] = world.received
            faults.detach(*clients)
            return Case(target, point, out, list(faults.trace), list(faults.fired))
    finally:
        obs.set_stream(None)


def matrix(target: str, backend: str = "fake", failures: bool = False,
           settings: Settings | None = None) -> list[Case]:
    """Crash before/after every call of the clean run; with ``failures``, also fail each call for good."""
    clean = run_case(target, None, backend, settings)
    cases = [clean]
    points = crash_points(clean.trace) + (fail_points(clean.trace) if failures else [])
    for point in points:
        cases.append(run_case(target, point, backend, settings))
    return cases


def loss_matrix(backend: str = "fake") -> list[Case]:
    """Lose the kth delay-queue message (SQS loses it / it is purged) for every k of the scenario."""
    clean = run_case("poller", None, backend)
    n = clean.outcome.__dict__.get("delay_messages") or 0
    cases = []
    for k in range(1, n + 1):
        cases.append(run_case("poller", CrashPoint("lose", "delay message", k), backend))
    return [clean] + cases


def check(case: Case) -> list[str]:
    """Invariant violations of one case (empty when all hold)."""
    o = case.outcome
    problems = o.violations()
    if o.duplicates and not case.fired:
        problems.append("duplicates without a crash")
    if case.point is not None and not case.fired:
        problems.append("crash point never reached")
    errors = [e for e in o.errors if not (case.point is not None and case.point.when == "fail" and "injected" in e)]
    if errors:
        problems.append(f"handler errors {errors[:3]}")
    return problems


def format_matrix(cases: list[Case]) -> str:
    head = "| target | crash point | delivered/expected | dup | lost | early | max late (s) | ok |"
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for c in cases:
        o = c.outcome
        problems = check(c)
        lines.append(
            f"| {c.target} | {c.point or 'none (clean run)'} | {len(o.by_key)}/{len(o.expected)} | {o.duplicates} "
            f"| {len(o.lost)} | {len(o.early)} | {o.max_lateness_ms / 1000:.1f} | "
            f"{'yes' if not problems else '; '.join(problems)} |"
        )
    return "\n".join(lines)


def main() -> None:
    import sys

    args = sys.argv[1:]
    backend = "moto" if "--moto" in args else "fake"
    targets = [a for a in args if not a.startswith("--")] or list(TARGETS)
    print(f"crash matrix ({backend}; scenario: rows due -1 h, +5 s, three at +14 min (one group), two at +16 min (one group) and one malformed row)")
    for target in targets:
        print(format_matrix(matrix(target, backend, failures="--failures" in args)))
        print()
    print("lost SQS messages (each delay-queue message of the scenario lost once, in turn)")
    print(format_matrix(loss_matrix(backend)))


if __name__ == "__main__":
    main()


@dataclass
class ItemsRun:
    outcome: Outcome
    rejected: list[dict[str, Any]]
    log: str
    remaining: list[dict[str, Any]]  # rows still in the table at the end (any partition)
    wall_s: dict[str, float] | None = None  # real seconds spent in each handler
    invocations: dict[str, int] | None = None


def run_items(items: list[dict[str, Any]], expected: dict[str, int], backend: str = "fake",
              settings: Settings | None = None, horizon_ms: int = HORIZON, start_ms: int = START,
              fire_offset_ms: int = 5_000) -> ItemsRun:
    """Write raw items (DynamoDB JSON) at START, let the whole system run, report what came out."""
    log = io.StringIO()
    obs.set_stream(log)
    try:
        with environment(backend, settings, start_ms, fire_offset_ms) as (world, _clients):
            s = world.deps.settings
            for item in items:
                world.deps.ddb.put_item(TableName=s.table_name, Item=item)
            world.run_until(horizon_ms, stop=world.idle)
            rejected = list(world.log.rejected)
            remaining = world.deps.ddb.scan(TableName=s.table_name).get("Items", []) if backend == "moto" else [
                v for v in world.deps.ddb._aws.items.values()]
            ready = {sk: max(due, start_ms) for sk, due in expected.items()}
            return ItemsRun(world.outcome(expected, ready=ready), rejected, log.getvalue(), remaining,
                            dict(world.log.wall_s), dict(world.log.invocations))
    finally:
        obs.set_stream(None)


def calls_by_handler() -> dict[str, set[str]]:
    """The AWS operations each handler really makes, over scenarios that walk every path:
    the crash-matrix scenario, the hostile catalogue (rejections by editor and poller), a row
    that turns invalid before delivery (consumer rejection), cancellations and reschedules."""
    from tests.reliability.test_hostile import REJECTED, VALID

    seen: dict[str, set[str]] = {t: set() for t in TARGETS}
    log = io.StringIO()
    obs.set_stream(log)
    try:
        for editor_on in (True, False):  # without the editor, the poller meets the bad rows itself
            with environment("fake") as (world, clients):
                recorders = {t: Faults(*clients, enabled=False) for t in TARGETS}
                for t in TARGETS:
                    setattr(world, t, _targeted(getattr(world, t), recorders[t]))
                s = world.deps.settings
                rows = [r for r, _ in VALID.values()] + [r for r, _ in REJECTED.values() if "S" in r["sk"]]
                for name, due in ROWS.items():
                    put_row(world, encode_sk(due, name), {"task": name})
                for r in rows:
                    world.deps.ddb.put_item(TableName=s.table_name, Item=r)
                if not editor_on:
                    world.skip_stream()
                world.run_poller()
                # turns invalid after it was sent: the consumer meets it
                world.deps.ddb.put_item(TableName=s.table_name, Item={
                    "pk": {"S": s.partition_for("soon")}, "sk": {"S": encode_sk(ROWS["soon"], "soon")},
                    "payload": {"S": "not a map any more"}, "punctual_enqueued_ms": {"N": str(START)},
                    "punctual_attempt": {"N": "1"}})
                world.deps.ddb.delete_item(TableName=s.table_name, Key={
                    "pk": {"S": s.partition_for("beyond")}, "sk": {"S": encode_sk(ROWS["beyond"], "beyond")}})
                if not editor_on:
                    world.skip_stream()
                # a poll asked for through the delay queue (a poll or an editor could not arm): the
                # consumer arms it through the meta row and the rule
                world.deps.sqs.send_message(QueueUrl=s.delay_queue_url,
                                            MessageBody=PollRequest(poll_by_ms=START, reason="test").body())
                world.run_until(HORIZON, stop=world.idle)
                for t in TARGETS:
                    seen[t] |= set(recorders[t].trace)
                    recorders[t].detach(*clients)
    finally:
        obs.set_stream(None)
    return seen
