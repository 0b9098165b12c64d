"""The alternatives, modelled with the same latency parameters as the Punctual run.

- cdk-scheduler (npm): an EventBridge rule every 14 minutes runs a Lambda that Queries
  ``sk BETWEEN now AND now+15min`` (one page: DynamoDB stops at 1 MB, no pagination), sends
  each row with ``DelaySeconds = floor((due - now)/1000)`` and deletes it; a stream handler
  does the same for rows due within 15 min when written. Reproduced gaps: floored delays
  (up to 1 s early, plus SQS early visibility), rows beyond the 1 MB page, rows that are
  past due when read (a failed or late extract), duplicates when both paths send a row.
- EventBridge Scheduler: one one-time schedule per task (``at()`` rounded up to the second,
  flexible window OFF), fired within 60 s after its time, $1.00 per million invocations.

These are simplified simulations (no moto): one pass over the scenario in time order.
"""

from __future__ import annotations

import bisect
import heapq
import random
from collections import Counter

from .models import Models
from .punctual_sim import Invocation, RunResult
from .scenarios import Scenario

ROW_BYTES = 120  # pk + 13-digit#id sk + small payload map, as DynamoDB sizes it


def _u(rng: random.Random, lo_hi: tuple[int, int]) -> int:
    return rng.randint(lo_hi[0], lo_hi[1])


def cdk_scheduler(sc: Scenario, m: Models, seed: int) -> RunResult:
    rng = random.Random(seed * 31 + 5)
    res = RunResult("cdk-scheduler", sc.name, sc.n, sc.horizon_ms, {}, sc.dues, sc.inserts)
    fail = m.fault_call_failure_rate if sc.faults else 0.0
    crash = m.fault_crash_rate if sc.faults else 0.0
    # events: (time, kind, payload); kinds: 0 insert, 1 extract, 2 stream
    heap: list[tuple[int, int, int, int]] = []
    seq = 0

    def push(t: int, kind: int, x: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, kind, seq, x))

    for i in range(sc.n):
        push(sc.inserts[i], 0, i)
    minute = 0
    while minute <= sc.horizon_ms:  # rate(14 minutes): fires somewhere in each scheduled minute
        push(minute + rng.randint(0, m.rule_fire_spread_ms - 1) + _u(rng, m.rule_target_delay_ms), 1, 0)
        minute += m.cdk_period_ms
    table: list[tuple[int, int]] = []  # sorted (due, i) still in the table
    warm_until = {"extract": -1, "stream": -1}
    sqs_ms = sum(m.api_latency_ms["sqs"]) // 2
    ddb_ms = sum(m.api_latency_ms["dynamodb"]) // 2

    def start(fn: str, t: int) -> tuple[int, bool]:
        cold = t > warm_until[fn]
        return t + (_u(rng, m.cold_start_ms) if cold else 0), cold

    def send(i: int, now: int) -> None:
        delay = max(0, (sc.dues[i] - now) // 1000)  # floored: the documented gap
        visible = now + delay * 1000 - rng.randint(0, m.sqs_early_max_ms)
        res.deliveries.setdefault(i, []).append(max(now, visible))
        # a tenth of a batch: RunResult.requests is a Counter (int-typed) until _round_requests
        res.requests[("cdk", "sqs.SendMessage(batch/10)")] += 0.1  # type: ignore[assignment]
        res.requests[("cdk", "dynamodb.DeleteItem")] += 1
        res.ddb_wru += 1

    while heap:
        t, kind, _, x = heapq.heappop(heap)
        if t > sc.horizon_ms:
            break
        if kind == 0:
            bisect.insort(table, (sc.dues[x], x))
            res.requests[("user", "dynamodb.PutItem")] += 1
            push(t + _u(rng, m.stream_latency_ms), 2, x)
        elif kind == 2:  # near-future stream handler: NewImage of the insert, no existence check
            begin, cold = start("stream", t)
            if sc.dues[x] - begin <= m.cdk_window_ms + 60_000:
                if rng.random() < fail ** 3:  # SDK retries twice; the record's batch is retried by Lambda
                    push(begin + 1_000, 2, x)
                    continue
                send(x, begin + sqs_ms)
                k = bisect.bisect_left(table, (sc.dues[x], x))
                if k < len(table) and table[k] == (sc.dues[x], x):
                    table.pop(k)
                sent = 1
            else:
                sent = 0
            end = begin + sqs_ms + ddb_ms
            warm_until["stream"] = end + m.warm_idle_ms
            res.invocations.append(Invocation("cdk-stream", begin, end - t, cold, sent, None))
            res.requests[("cdk-stream", "lambda.Invoke")] += 0  # invocations are counted below
        else:  # extract: one Query page, send, delete
            begin, cold = start("extract", t)
            lo = bisect.bisect_left(table, (begin, -1))
            hi = bisect.bisect_right(table, (begin + m.cdk_window_ms, sc.n))
            page = table[lo:hi][: m.cdk_query_limit_bytes // ROW_BYTES]
            res.requests[("cdk-extract", "dynamodb.Query")] += 1
            res.ddb_rru += max(1, len(page) * ROW_BYTES // 4096) / 2  # eventually consistent
            now = begin + ddb_ms
            sent = 0
            died = rng.random() < crash * (1 + len(page) * 1.1)
            cut = rng.randint(0, len(page)) if died else len(page)
            for k, (_due, i) in enumerate(page[:cut]):
                if k % 10 == 0:
                    now += sqs_ms + ddb_ms
                send(i, now)
                sent += 1
            del table[lo : lo + cut]  # the rows sent are the first ``cut`` of the page
            warm_until["extract"] = now + m.warm_idle_ms
            res.invocations.append(Invocation("cdk-extract", begin, now - t, cold, sent, "crash" if died else None))
            if died:  # async retry after 1 minute reads from its own, later, now
                push(now + m.async_retry_delays_ms[0], 1, 0)
    res.notes.append("cdk-scheduler: simplified simulation of its published handlers (no moto)")
    res.counters["rows_left_in_table"] = len(table)
    for inv in res.invocations:
        res.requests[(inv.fn, "lambda.Invoke")] += 1
    _round_requests(res)
    return res


def eventbridge_scheduler(sc: Scenario, m: Models, seed: int) -> RunResult:
    rng = random.Random(seed * 37 + 11)
    res = RunResult("eventbridge-scheduler", sc.name, sc.n, sc.horizon_ms, {}, sc.dues, sc.inserts)
    for i in range(sc.n):
        at = -(-sc.dues[i] // 1000) * 1000  # at() has second granularity: round up, never early
        created = sc.inserts[i] + sum(m.api_latency_ms["events"]) // 2
        fire = max(at, created) + rng.randint(0, m.scheduler_fire_window_ms - 1)
        res.deliveries[i] = [fire + _u(rng, m.api_latency_ms["sqs"])]
        res.requests[("user", "scheduler.CreateSchedule")] += 1
        res.requests[("scheduler", "sqs.SendMessage")] += 1
    res.extra_cost_usd = 0.0
    res.counters["scheduled_invocations"] = sc.n
    res.notes.append("EventBridge Scheduler: modelled (one schedule per task, target SQS SendMessage)")
    return res


def _round_requests(res: RunResult) -> None:
    res.requests = Counter({k: round(v) for k, v in res.requests.items()})
