"""cdk-scheduler (npm ``cdk-scheduler`` 0.2.3), modelled from its source: github guiyom-e/cdk-scheduler at
f5eb62c, files under ``cdk-scheduler/lib/`` (cited below as ``index.ts:81``, ``extract.ts:37``,
``handleNearFuture.ts:26``, ``helpers.ts:40``, ``send.ts:58`` for ``functions/sendEventsToSQSAndDeleteRecords.ts``).

What its construct and handlers do, each behaviour where the source says it:
- Two NodejsFunctions with no ``timeout`` nor ``memorySize`` (index.ts:81-89, 95-104): the CDK defaults,
  3 s and 128 MB; ``retryAttempts: 2`` (index.ts:84, 99): an extract that fails is retried twice,
  after 1 and 2 min (Lambda's asynchronous retries).
- A rule ``rate(14 minutes)`` (index.ts:18, 117) runs the extract, which Queries once
  ``pk = :pk AND sk BETWEEN :now AND :future`` with ``:future`` = now + 15 min (extract.ts:37-44,
  helpers.ts:52-62): no pagination (one page, DynamoDB stops at 1 MB), eventually consistent, and a row
  due before ``now`` is never read (after a failure the retry reads from its own, later, now).
- The stream (NEW_IMAGE, index.ts:72-74) invokes the near-future handler through a DynamoEventSource with
  no filter and no retry limit (index.ts:109-113: only ``startingPosition``): REMOVE records (every
  delete) invoke it too, batches of up to 100 (the default), and a failing batch is retried until its
  records expire (24 h), holding its shard. The handler keeps INSERT / MODIFY records whose NewImage has
  an sk (handleNearFuture.ts:8-11, 26-34) and whose ``floor((due - now) / 1000) <= 900`` (helpers.ts:27-34,
  handleNearFuture.ts:33): rows due in < 901 s, past-due ones included, taken from the image without
  reading the table (a row the extract already sent is sent again).
- Both send with ``sendEventsToSQSAndDeleteRecords`` (send.ts:43-138): chunks of 10 records
  (send.ts:15, 58-66), one SQS message per record, ``DelaySeconds = max(0, floor((due - now) / 1000))``
  (send.ts:27-28, helpers.ts:27-34: up to 1 s early); entry ids from the sk (helpers.ts:40-48: the digits,
  '#' -> '-', the id up to its first character outside [A-Za-z0-9_-], 80 characters), which collide when
  two rows share them (SQS then rejects the whole batch: BatchEntryIdsNotDistinct, and the handler
  throws). Failed entries are only reported (send.ts:124): not retried, not deleted. After each chunk it
  re-filters the WHOLE page for the chunk's successful ids (send.ts:72-79; CPU per row of the page,
  measured by bench/measure_cdk_refilter.js) and deletes what matched with BatchWriteItem, 25 keys a call
  in parallel (send.ts:76-97; one call per chunk of 10), errors swallowed (``.catch(() => null)``,
  send.ts:95) and UnprocessedItems only reported (send.ts:105-127), never retried.
- Rows are ~64 B (pk "scheduler", a 13-digit#id sk, a small payload map; DynamoDB's item size is its
  attribute names and values): a 1 MB page holds ~16,384.

Modelled with the same latency, cold-start, SQS and fault models as Punctual's run, and the client CPU of
:mod:`punctual.bench.cpu` at 128 MB: the Node SDK is charged botocore's measured CPU per call
(``cdk_sdk_cpu_scale`` = 1, an **assumption**: not measured for Node; 0 is the reading most favourable to
cdk-scheduler). "Delivered" is when a message becomes visible in the user's queue. Effects of a call the
deadline interrupts are dropped (the invocation dies at 3 s).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .cpu import cpu_ms, vcpu_share
from .models import Models
from .punctual_sim import Invocation, RunResult
from .scenarios import Scenario

TIMEOUT_MS = 3_000  # index.ts:81-89, 95-104: no timeout set, the CDK default (3 s)
CDK_MEMORY_MB = 128  # ditto: no memorySize set, the CDK default
ASYNC_RETRIES = 2  # index.ts:84, 99: retryAttempts 2
WINDOW_S = 900  # handleNearFuture.ts:33: (CRON_DELAY_IN_MINUTES + 1) * 60 with CRON_DELAY_IN_MINUTES = 14
SQS_BATCH = 10  # send.ts:15
DELETE_PAGE = 25  # send.ts:76
STREAM_BATCH = 100  # index.ts:110-112 sets no batchSize: DynamoEventSource's default
STREAM_RECORD_TTL_MS = 86_400_000  # DynamoDB Streams keep records 24 h; Lambda retries a batch until then
ROW_BYTES = 64
SDK_ATTEMPTS = {"sqs": 4, "dynamodb": 3}  # aws-sdk v2 SQS maxRetries 3; @aws-sdk/client-dynamodb v3 maxAttempts 3
FUNCTIONS = ("cdk-extract", "cdk-stream")
_SQS_ID = re.compile(r"^(\d+#?[a-zA-Z0-9_-]*)")


def sqs_entry_id(sk: str) -> str:
    """extractIdForSQS (helpers.ts:40-48): the leading digits and id, '#' -> '-', at most 80 characters."""
    match = _SQS_ID.match(sk)
    if match is None:
        raise ValueError("Could not parse id")
    return match.group(1).replace("#", "-", 1)[:80]


def floored_delay_s(due_ms: int, now_ms: int) -> int:
    """extractDelaySeconds (helpers.ts:27-34): floored, 0 for a past-due row."""
    return max(0, (due_ms - now_ms) // 1000)


def near_future(due_ms: int, now_ms: int) -> bool:
    """The stream handler takes a record when its floored delay is at most 900 s (handleNearFuture.ts:33)."""
    return floored_delay_s(due_ms, now_ms) <= WINDOW_S


def readable_batch(shard: deque[tuple[int, str, int]], t: int) -> list[tuple[int, str, int]]:
    """Up to 100 records from the head of the shard, in order, that are readable at ``t``."""
    batch: list[tuple[int, str, int]] = []
    for record in itertools.islice(shard, STREAM_BATCH):
        if record[0] > t:
            break
        batch.append(record)
    return batch


def page_rows(limit_bytes: int) -> int:
    return limit_bytes // ROW_BYTES


def chunks(items: list[int], size: int) -> list[list[int]]:
    return [items[k:k + size] for k in range(0, len(items), size)]


class Timeout(Exception):
    """The invocation reached its 3 s deadline: Lambda stops it there."""


class SdkCallFailed(Exception):
    """An SDK call raised (the handler catches it only around its deletes)."""


class Crash(Exception):
    """The function died right after a call (faults scenario): its effects so far remain."""


@dataclass
class Run:
    """One invocation's clock: ``now`` moves by each call's latency and client CPU."""
    fn: str
    now: int
    deadline: int
    sent: int = 0


class CdkScheduler:
    def __init__(self, sc: Scenario, m: Models, seed: int):
        self.sc, self.m = sc, m
        self.rng = random.Random(seed * 31 + 5)
        self.res = RunResult("cdk-scheduler", sc.name, sc.n, sc.horizon_ms, {}, sc.dues, sc.inserts)
        self.fail = m.fault_call_failure_rate if sc.faults else 0.0
        self.crash = m.fault_crash_rate if sc.faults else 0.0
        self.heap: list[tuple[int, int, Callable[[int], None]]] = []
        self.seq = 0
        self.table: list[tuple[int, int]] = []  # (due, task) still in the table, sorted
        self.shard: deque[tuple[int, str, int]] = deque()  # (readable at, eventName, task), in write order
        self.lane_busy = False
        self.lane_poll_at: int | None = None
        self.warm_until = dict.fromkeys(FUNCTIONS, -1)
        self.counters = self.res.counters

    # ------------------------------------------------------------------ the event loop
    def at(self, t: int, action: Callable[[int], None]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, action))

    def run(self) -> RunResult:
        for i in self.sc.order():
            self.at(self.sc.inserts[i], partial(self.insert, i))
        minute = 0
        while minute <= self.sc.horizon_ms:  # rate(14 minutes), fired somewhere in its minute like any rule
            fire = (minute + self.rng.randint(0, self.m.rule_fire_spread_ms - 1)
                    + self.m.rule_target_delay_ms.sample(self.rng))
            self.at(fire, lambda t: self.extract(t, attempt=0))
            minute += self.m.cdk_period_ms
        while self.heap and self.heap[0][0] <= self.sc.horizon_ms:
            t, _, action = heapq.heappop(self.heap)
            action(t)
        self.counters["rows_left_in_table"] = len(self.table)
        for inv in self.res.invocations:
            self.res.requests[(inv.fn, "lambda.Invoke")] += 1
        self.res.notes.append("cdk-scheduler: modelled from its source (guiyom-e/cdk-scheduler@f5eb62c)")
        return self.res

    def _u(self, lo_hi: tuple[int, int]) -> int:
        return self.rng.randint(lo_hi[0], lo_hi[1])

    # ------------------------------------------------------------------ the table and its stream
    def insert(self, i: int, t: int) -> None:
        bisect.insort(self.table, (self.sc.dues[i], i))
        self.res.requests[("user", "dynamodb.PutItem")] += 1
        self.res.ddb_wru += 1  # the user's put: in the dollars, as for Punctual
        self.stream_write("INSERT", i, t)

    def remove(self, i: int, t: int) -> bool:
        k = bisect.bisect_left(self.table, (self.sc.dues[i], i))
        if k < len(self.table) and self.table[k] == (self.sc.dues[i], i):
            self.table.pop(k)
            self.stream_write("REMOVE", i, t)
            return True
        return False

    def stream_write(self, event: str, i: int, t: int) -> None:
        """A record, readable after the stream's latency and never before the records written before it."""
        readable = max(t + self.m.stream_latency_ms.sample(self.rng), self.shard[-1][0] if self.shard else 0)
        self.shard.append((readable, event, i))
        self.poll_lane(readable)

    def poll_lane(self, t: int) -> None:
        """The one shard (one partition key value) is read by one batch at a time (no ParallelizationFactor)."""
        if not self.lane_busy and (self.lane_poll_at is None or t < self.lane_poll_at):
            self.lane_poll_at = t
            self.at(t, self.stream_batch)

    def stream_batch(self, t: int) -> None:
        if self.lane_busy or self.lane_poll_at != t:
            return
        self.lane_poll_at = None
        batch = readable_batch(self.shard, t)
        if not batch:
            if self.shard:
                self.poll_lane(self.shard[0][0])
            return
        self.lane_busy = True
        self.stream_attempt(batch, t)

    def stream_attempt(self, batch: list[tuple[int, str, int]], t: int) -> None:
        ok, end = self.invoke("cdk-stream", t, lambda run: self.near_future_handler(batch, run))
        if not ok and t - batch[0][0] < STREAM_RECORD_TTL_MS:  # retried until its records expire
            self.counters["cdk_stream_batches_retried"] += 1
            self.at(end + self.m.stream_retry_delay_ms, lambda t2: self.stream_attempt(batch, t2))
            return
        if not ok:
            self.counters["cdk_stream_records_expired"] += len(batch)
        for _ in batch:
            self.shard.popleft()
        self.lane_busy = False
        if self.shard:
            self.poll_lane(max(end, self.shard[0][0]))

    # ------------------------------------------------------------------ the two handlers
    def near_future_handler(self, batch: list[tuple[int, str, int]], run: Run) -> None:
        """handleNearFuture.ts:26-44: INSERT/MODIFY images due in < 901 s, then send and delete."""
        if all(event == "REMOVE" for _, event, _ in batch):
            self.counters["cdk_stream_invocations_for_removes_only"] += 1
        records = [i for _, event, i in batch if event in ("INSERT", "MODIFY")
                   and near_future(self.sc.dues[i], run.now)]
        self.send_and_delete(records, run)

    def extract(self, t: int, attempt: int) -> None:
        ok, end = self.invoke("cdk-extract", t, self.extract_handler)
        if not ok and attempt < ASYNC_RETRIES:
            self.at(end + self.m.async_retry_delays_ms[attempt], lambda t2: self.extract(t2, attempt + 1))

    def extract_handler(self, run: Run) -> None:
        """extract.ts:33-55: one Query page of [now, now + 15 min), then send and delete."""
        lo = bisect.bisect_left(self.table, (run.now, -1))
        hi = bisect.bisect_left(self.table, (run.now + self.m.cdk_window_ms, -1))
        page = [i for _, i in self.table[lo:hi][: page_rows(self.m.cdk_query_limit_bytes)]]
        self.call(run, "dynamodb.Query", response_items=len(page))
        self.res.ddb_rru += max(1, -(-len(page) * ROW_BYTES // 4096)) / 2  # eventually consistent
        if hi - lo > len(page):
            self.counters["cdk_rows_beyond_the_page"] += hi - lo - len(page)
        self.send_and_delete(page, run)

    def send_and_delete(self, records: list[int], run: Run) -> None:
        """sendEventsToSQSAndDeleteRecords (send.ts:43-138)."""
        ids = {i: sqs_entry_id(self.sk(i)) for i in records}
        for chunk in chunks(records, SQS_BATCH):
            if len({ids[i] for i in chunk}) < len(chunk):  # BatchEntryIdsNotDistinct: the call throws
                self.counters["cdk_batch_id_collisions"] += 1
                raise SdkCallFailed("BatchEntryIdsNotDistinct")
            created = run.now  # createSQSMessageFromRecord reads the clock before the call (send.ts:27)
            self.call(run, "sqs.SendMessageBatch", request_items=len(chunk))
            successful = set()
            for i in chunk:
                if self.rng.random() < self.fail:  # a failed entry: reported, never retried (send.ts:124)
                    self.counters["cdk_failed_entries_dropped"] += 1
                    continue
                successful.add(ids[i])
                visible = run.now + floored_delay_s(self.sc.dues[i], created) * 1000 - self.rng.randint(
                    0, self.m.sqs_early_max_ms)
                self.res.deliveries.setdefault(i, []).append(max(run.now, visible))
                run.sent += 1
            self.cpu(run, self.m.cdk_refilter_us_per_row * len(records) / 1000)  # send.ts:72-79, the whole page
            self.delete([i for i in records if ids[i] in successful], run)

    def delete(self, matched: list[int], run: Run) -> None:
        """BatchWriteItem per 25 keys, in parallel (send.ts:80-98): errors swallowed, UnprocessedItems dropped."""
        pages = chunks(matched, DELETE_PAGE)
        for k, page in enumerate(pages):
            try:
                self.call(run, "dynamodb.BatchWriteItem", request_items=len(page), latency=k == 0)
            except SdkCallFailed:
                self.counters["cdk_delete_errors_swallowed"] += 1
                continue
            for i in page:
                if self.remove(i, run.now):
                    self.res.ddb_wru += 1

    # ------------------------------------------------------------------ calls and invocations
    def sk(self, i: int) -> str:
        return f"{self.sc.dues[i]:013d}#t{i:07d}"

    def cpu(self, run: Run, ms_at_one_vcpu: float) -> None:
        """The handler's own JavaScript, measured at one vCPU, run at 128 MB's share of one."""
        run.now += round(ms_at_one_vcpu / vcpu_share(CDK_MEMORY_MB))
        if run.now > run.deadline:
            raise Timeout

    def call(self, run: Run, api: str, request_items: int = 0, response_items: int = 0, latency: bool = True) -> None:
        """One SDK call: its latency and client CPU at 128 MB, the deadline, the SDK's retries of injected
        failures, a crash after it. Counted when it reached AWS."""
        service = api.split(".")[0]
        lat = self._u(self.m.api_latency_ms[service]) if latency else 0
        spent = cpu_ms(api, request_items, CDK_MEMORY_MB, self.m.cdk_sdk_cpu_scale) + cpu_ms(
            api, response_items, CDK_MEMORY_MB, self.m.cdk_sdk_cpu_scale, base=False)
        run.now += lat + round(spent)
        if run.now > run.deadline:
            raise Timeout
        self.res.requests[(run.fn, api)] += 1
        if self.fail and self.rng.random() < self.fail ** SDK_ATTEMPTS[service]:
            raise SdkCallFailed(api)
        if self.crash and self.rng.random() < self.crash:
            raise Crash(f"crash after {api}")

    def invoke(self, fn: str, t: int, body: Callable[[Run], None]) -> tuple[bool, int]:
        """Run ``body`` as an invocation of ``fn`` at ``t`` (cold when idle past warm_idle_ms)."""
        cold = t > self.warm_until[fn]
        begin = t + (self.m.cold_start_ms.sample(self.rng) if cold else 0)
        run = Run(fn, begin, begin + TIMEOUT_MS)
        error: str | None = None
        try:
            body(run)
            run.now += 1  # the handler's own JS between calls: at least the 1 ms Lambda bills
        except Timeout:
            run.now, error = run.deadline, "timeout"
            self.counters[f"cdk_timeouts:{fn}"] += 1
        except (SdkCallFailed, Crash) as exc:
            error = str(exc)
        self.warm_until[fn] = run.now + self.m.warm_idle_ms.sample(self.rng)
        self.res.invocations.append(Invocation(fn, begin, run.now - t, cold, run.sent, error))
        return error is None, run.now


def cdk_scheduler(sc: Scenario, m: Models, seed: int) -> RunResult:
    return CdkScheduler(sc, m, seed).run()
