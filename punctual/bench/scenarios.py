"""Seeded, reproducible workloads: when each task is inserted and when it is due.

Times are ms relative to the start of the run (the simulator adds its epoch).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SECOND, MINUTE, HOUR, DAY = 1_000, 60_000, 3_600_000, 86_400_000


@dataclass
class Scenario:
    name: str
    description: str
    inserts: list[int]  # insert time of task i (ms from start)
    dues: list[int]  # due time of task i (ms from start)
    horizon_ms: int  # the run ends here (every task is due well before)
    faults: bool = False
    params: dict[str, object] = field(default_factory=dict)
    # DynamoDB's per-partition limits apply (punctual.bench.capacity; --backend fake only)
    throttling: bool = False
    # (service of punctual.bench.outages.SERVICES, from, to) in ms from the start: its calls fail
    outages: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.dues)

    def order(self) -> list[int]:
        return sorted(range(self.n), key=lambda i: (self.inserts[i], i))


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _finish(name, desc, inserts, dues, faults=False, tail_ms=30 * MINUTE, **params) -> Scenario:
    return Scenario(name, desc, inserts, dues, max(dues) + tail_ms, faults, params)


def steady(seed: int, n: int = 100_000, days: float = 7) -> Scenario:
    rng = random.Random(seed)
    span = int(days * DAY)
    inserts = [rng.randrange(0, span) for _ in range(n)]
    dues = [t + int(_log_uniform(rng, SECOND, span)) for t in inserts]
    return _finish("steady", f"{n:,} tasks inserted over {days:g} days, lead log-uniform 1 s..{days:g} days",
                   inserts, dues, n=n, days=days)


def late(seed: int, n: int = 20_000, hours: float = 1) -> Scenario:
    """Half the rows are late inserts (0.1-900 s before due), half long-lead rows that keep
    polls busy, so late inserts land while a poll runs."""
    rng = random.Random(seed)
    span = int(hours * HOUR)
    inserts, dues = [], []
    for i in range(n):
        t = rng.randrange(0, span)
        lead = rng.uniform(100, 900_000) if i % 2 == 0 else rng.uniform(15 * MINUTE, 3 * HOUR)
        inserts.append(t)
        dues.append(t + int(lead))
    return _finish("late", f"{n:,} tasks over {hours:g} h: half inserted 0.1-900 s before due, half 15 min-3 h",
                   inserts, dues, n=n, hours=hours)


def burst(seed: int, n: int = 50_000) -> Scenario:
    rng = random.Random(seed)
    due = 3 * HOUR + 123  # all due within the same second
    inserts = [rng.randrange(HOUR, due - 20 * MINUTE) for _ in range(n)]
    dues = [due + rng.randrange(0, 1000) for _ in range(n)]
    return _finish("burst", f"{n:,} tasks due in the same second, inserted 20 min-2 h before", inserts, dues, n=n)


def _cluster_sizes(rng: random.Random, total: int, max_cluster: int) -> list[int]:
    """Log-uniform sizes in 1..max_cluster summing to ``total`` (the last one is cut to fit)."""
    sizes: list[int] = []
    while total > 0:
        size = min(total, max_cluster, int(_log_uniform(rng, 1, max_cluster + 1)))
        sizes.append(max(1, size))
        total -= sizes[-1]
    return sizes


def _top_of_minute_lead(rng: random.Random, late_share: float, max_lead_ms: int) -> int:
    """Most rows are written 20 min to hours ahead (the poller's path), ``late_share`` of them
    within the 15-minute window (the editor's fast path)."""
    if rng.random() < late_share:
        return int(rng.uniform(SECOND, 15 * MINUTE))
    return int(_log_uniform(rng, 20 * MINUTE, max_lead_ms))


def top_of_minute(seed: int, n: int = 100_000, hours: float = 24, on_minute: float = 0.8,
                  max_cluster: int = 5_000, late_share: float = 0.15, max_lead_ms: int = 4 * HOUR) -> Scenario:
    """``on_minute`` of the tasks due exactly on whole minutes (due_ms % 60,000 == 0), in clusters
    of log-uniform size 1..max_cluster, each cluster on its own minute; the rest sparse (uniform ms,
    never on a whole minute). Dues start after ``max_lead_ms`` so that every lead fits."""
    rng = random.Random(seed)
    start, span = max_lead_ms, int(hours * HOUR)
    sizes = _cluster_sizes(rng, round(n * on_minute), max_cluster)
    minutes = range(start // MINUTE + 1, (start + span) // MINUTE)
    if len(sizes) > len(minutes):
        raise ValueError(f"{len(sizes)} clusters do not fit in {len(minutes)} minutes: raise hours or max_cluster")
    dues = [m * MINUTE for m, size in zip(rng.sample(minutes, len(sizes)), sizes, strict=True) for _ in range(size)]
    for _ in range(n - len(dues)):
        due = rng.randrange(start, start + span)
        dues.append(due + 1 if due % MINUTE == 0 else due)
    inserts = [due - _top_of_minute_lead(rng, late_share, max_lead_ms) for due in dues]
    return _finish("top-of-minute",
                   f"{n:,} tasks due over {hours:g} h, {on_minute:.0%} on whole minutes in {len(sizes)} clusters "
                   f"of 1-{max_cluster:,}, the rest sparse; {late_share:.0%} inserted within 15 min of due, "
                   f"the others 20 min-{max_lead_ms / HOUR:g} h ahead",
                   inserts, dues, n=n, hours=hours, clusters=len(sizes), max_cluster=max_cluster)


def idle(seed: int, days: float = 7) -> Scenario:
    rng = random.Random(seed)
    span = int(days * DAY)
    inserts = [rng.randrange(0, span // 2) for _ in range(3)]
    dues = [t + rng.randrange(HOUR, span // 2) for t in inserts]
    return Scenario("idle", f"3 tasks over {days:g} days", inserts, dues, span, params={"days": days})


def firehose(seed: int, rate: int = 10_000, seconds: float = 60, n: int | None = None) -> Scenario:
    """``rate`` inserts a second for ``seconds`` (evenly spaced), each due 1-30 min ahead (uniform),
    against DynamoDB's per-partition limits: every task shares one partition key value.
    ``n`` (``--tasks``) keeps the rate and sets the duration."""
    rng = random.Random(seed)
    n = n if n is not None else int(rate * seconds)
    inserts = [i * SECOND // rate for i in range(n)]
    dues = [t + rng.randrange(MINUTE, 30 * MINUTE) for t in inserts]
    sc = _finish("firehose", f"{n:,} tasks inserted at {rate:,}/s for {n / rate:g} s, due 1-30 min ahead, "
                 "one DynamoDB partition (1,000 WCU/s, 3,000 RCU/s)", inserts, dues, n=n, rate=rate)
    sc.throttling = True
    return sc


# The faults scenario's outages: each service in turn, for 5 and for 30 minutes (issue 28).
OUTAGE_SERVICES = ("dynamodb writes", "dynamodb reads", "delay queue", "delivery queue", "eventbridge")
OUTAGE_MINUTES = (5, 30)


def outage_schedule(span_ms: int) -> list[tuple[str, int, int]]:
    """Every service of OUTAGE_SERVICES out for each of OUTAGE_MINUTES, in turn, evenly spread over
    ``span_ms`` (the first and the last a gap away from its ends)."""
    plan = [(service, minutes) for minutes in OUTAGE_MINUTES for service in OUTAGE_SERVICES]
    gap = span_ms // (len(plan) + 1)
    return [(service, (k + 1) * gap, (k + 1) * gap + minutes * MINUTE) for k, (service, minutes) in enumerate(plan)]


def after_recovery_ms(due_ms: int, delivered_ms: int, outages: list[tuple[str, int, int]], lead_ms: int) -> int:
    """How late a delivery is against the outage promise (docs/reliability.md, "Outages"): from its
    due time, or, for a task due before the end of an outage plus the lead, from that end (the
    promise there: within 2 minutes of the recovery)."""
    ends = [end for _, start, end in outages if start <= due_ms + lead_ms and due_ms - lead_ms < end]
    return delivered_ms - max([due_ms, *ends])


def faults(seed: int, n: int = 100_000, days: float = 7) -> Scenario:
    sc = steady(seed, n, days)
    sc.name, sc.faults = "faults", True
    sc.outages = outage_schedule(int(days * 24 * 3_600_000))
    sc.description = (f"steady ({n:,} tasks, {days:g} days) with 1% of AWS calls failing, random crashes, and an "
                      f"outage of {' and of '.join(map(str, OUTAGE_MINUTES))} min of each of "
                      f"{', '.join(OUTAGE_SERVICES)} in turn")
    return sc


# Default sizes. The issue asks for 100,000 (steady, faults, top-of-minute) and 50,000 (burst) tasks;
# with the real handlers on moto (~3 ms of CPU per AWS call, ~12 calls per task) that is ~80 minutes
# per scenario on 2 cores, so the defaults are what fits in ~10 minutes. `--tasks N` runs any size.
FULL_TASKS = {"steady": 10_000, "late": 5_000, "burst": 10_000, "faults": 10_000, "top-of-minute": 20_000}
FULL = {
    "steady": lambda seed: steady(seed, n=FULL_TASKS["steady"]),
    "late": lambda seed: late(seed, n=FULL_TASKS["late"]),
    "burst": lambda seed: burst(seed, n=FULL_TASKS["burst"]),
    "idle": lambda seed: idle(seed),
    "faults": lambda seed: faults(seed, n=FULL_TASKS["faults"]),
    "top-of-minute": lambda seed: top_of_minute(seed, n=FULL_TASKS["top-of-minute"]),
    "firehose": lambda seed: firehose(seed),
}
# Quick top-of-minute: 1,000 tasks over 2 h, clusters of at most 300 (so that 800 clustered tasks
# make several clusters, not one).
QUICK_TOP_OF_MINUTE = {"hours": 2, "max_cluster": 300}
# Quick firehose: 3,000 inserts a second for 1 s (3,000 tasks): three times the partition's write limit.
QUICK_FIREHOSE = {"rate": 3_000, "seconds": 1}
QUICK = {
    "steady": lambda seed: steady(seed, n=400, days=0.5),
    "late": lambda seed: late(seed, n=300, hours=0.25),
    "burst": lambda seed: burst(seed, n=1_000),
    "idle": lambda seed: idle(seed, days=7),
    "faults": lambda seed: faults(seed, n=300, days=0.5),
    "top-of-minute": lambda seed: top_of_minute(seed, n=1_000, **QUICK_TOP_OF_MINUTE),
    "firehose": lambda seed: firehose(seed, **QUICK_FIREHOSE),
}
NAMES = list(FULL)
# What `punctual bench` runs without --scenario: firehose is a stress test of one partition's
# limits, run on request (`--scenario firehose --backend fake`).
DEFAULT_NAMES = [name for name in NAMES if name != "firehose"]
SIZED: dict[str, Callable[..., Scenario]] = {"steady": steady, "late": late, "burst": burst, "faults": faults, "top-of-minute": top_of_minute,
         "firehose": firehose}


def build(name: str, seed: int, quick: bool = False, n: int | None = None, rate: int | None = None) -> Scenario:
    """``rate``: firehose's inserts a second (with ``n``: for n / rate seconds, else for 60 s, or the
    quick run's seconds)."""
    if rate is not None:
        if name != "firehose":
            raise SystemExit(f"--rate applies to the firehose scenario, not {name}")
        seconds = QUICK_FIREHOSE["seconds"] if quick else 60
        return firehose(seed, rate=rate, seconds=seconds, n=n)
    if n is not None and name in SIZED:
        kw: dict[str, Any] = {"n": n}
        if quick and name in ("steady", "faults"):
            kw["days"] = 0.5
        if quick and name == "top-of-minute":
            kw.update(QUICK_TOP_OF_MINUTE)
        if quick and name == "firehose":
            kw["rate"] = QUICK_FIREHOSE["rate"]
        return SIZED[name](seed, **kw)
    return (QUICK if quick else FULL)[name](seed)
