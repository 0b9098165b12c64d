"""EventBridge Scheduler, modelled with the same latency parameters as the Punctual run (cdk-scheduler's
model, from its source, is punctual/bench/cdk_scheduler.py).

- EventBridge Scheduler: one one-time schedule per task (``at()`` rounded up to the second,
  flexible window OFF), fired within 60 s after its time, $1.00 per million invocations.

A simplified simulation (no moto): one pass over the scenario.
"""

from __future__ import annotations

import random

from .models import Models
from .punctual_sim import RunResult
from .scenarios import Scenario


def eventbridge_scheduler(sc: Scenario, m: Models, seed: int) -> RunResult:
    rng = random.Random(seed * 37 + 11)
    res = RunResult("eventbridge-scheduler", sc.name, sc.n, sc.horizon_ms, {}, sc.dues, sc.inserts)
    for i in range(sc.n):
        at = -(-sc.dues[i] // 1000) * 1000  # at() has second granularity: round up, never early
        created = sc.inserts[i] + sum(m.api_latency_ms["events"]) // 2
        fire = max(at, created) + rng.randint(0, m.scheduler_fire_window_ms - 1)
        lo, hi = m.api_latency_ms["sqs"]
        res.deliveries[i] = [fire + rng.randint(lo, hi)]
        res.requests[("user", "scheduler.CreateSchedule")] += 1
        res.requests[("scheduler", "sqs.SendMessage")] += 1
    res.extra_cost_usd = 0.0
    res.counters["scheduled_invocations"] = sc.n
    res.notes.append("EventBridge Scheduler: modelled (one schedule per task, target SQS SendMessage)")
    return res


