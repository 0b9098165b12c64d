"""The quick benchmark: the real handlers in virtual time keep the invariants, and the
cdk-scheduler model shows its known early deliveries (the comparison is not rigged).
The in-memory backend (``--backend fake``) gives the same invariants and lateness."""

from __future__ import annotations

import time

import pytest

from punctual.bench.models import Models
from punctual.bench.report import summarize
from punctual.bench.run import run_scenario


@pytest.fixture(scope="module")
def quick_steady():
    started = time.process_time()  # CPU: the machine may be shared
    results = {r.strategy: r for r in run_scenario("steady", seed=1, quick=True, models=Models(),
                                                    strategies=("punctual", "cdk-scheduler"))}
    return results, time.process_time() - started


def test_quick_steady_punctual_never_early_never_lost_and_cdk_scheduler_is_early(quick_steady):
    results, elapsed = quick_steady
    punctual, cdk = summarize(results["punctual"]), summarize(results["cdk-scheduler"])

    assert punctual.n >= 300
    assert punctual.early == 0
    assert punctual.lost == 0
    assert punctual.delivered == punctual.n
    assert punctual.p99 is not None and punctual.p99 < 5_000  # cold start + pickup, never minutes
    # Same scenario, same latency models: the floored-DelaySeconds design delivers early.
    assert cdk.early > 0
    assert elapsed < 60, f"quick steady took {elapsed:.0f} s of CPU"


def _close(a: float | None, b: float | None, rel: float, abs_ms: float) -> bool:
    return a is not None and b is not None and abs(a - b) <= max(abs_ms, rel * b)


def test_fake_backend_keeps_the_invariants_and_matches_moto(quick_steady):
    """Tolerance: lateness percentiles within 10 % or 50 ms of moto's, max within 20 % or
    200 ms, invocations within 5 % (seed 1 gives identical figures on both backends)."""
    results, _ = quick_steady
    moto = summarize(results["punctual"])
    started = time.process_time()
    (r,) = run_scenario("steady", seed=1, quick=True, models=Models(), strategies=("punctual",), backend="fake")
    elapsed = time.process_time() - started
    fake = summarize(r)

    assert fake.n == moto.n
    assert fake.early == 0
    assert fake.lost == 0
    assert fake.delivered == fake.n
    for q in ("p50", "p90", "p99"):
        assert _close(getattr(fake, q), getattr(moto, q), 0.10, 50), (q, getattr(fake, q), getattr(moto, q))
    assert _close(fake.max, moto.max, 0.20, 200), (fake.max, moto.max)
    assert abs(fake.invocations - moto.invocations) <= 0.05 * moto.invocations
    assert elapsed < 10, f"quick steady on the fake backend took {elapsed:.1f} s of CPU"


def test_a_burst_backlog_drains_as_fast_as_the_sqs_scaling_allows():
    """8,000 tasks due in the same second, one delay-queue message per row (group_span_ms=0: a
    backlog of 8,000 messages; fake backend, seed 1). Lambda's SQS event source runs
    5 batches at once and adds up to 300 a minute (5 a second) while messages wait; each slot
    takes a batch about every 0.2 s (pick-up + 2 calls + 10 deletes), so the backlog is gone
    after about 7 s: 50 x (5t + 2.5t^2) >= 8,000. A model that only chains one poll per full
    batch (the earlier simulator) drains it at one batch per pick-up latency: max 16 s."""
    (r,) = run_scenario("burst", seed=1, quick=False, tasks=8_000, models=Models(), strategies=("punctual-per-row",),
                        backend="fake")
    s = summarize(r)
    assert s.early == 0 and s.lost == 0 and s.delivered == s.n == 8_000
    assert r.counters["esm_peak_concurrency"] > Models().esm_initial_concurrency
    assert s.max is not None and s.max < 8_000, s.max


def test_one_lambda_sqs_poll_serves_every_message_it_was_scheduled_for():
    """Two messages whose pick-up polls land on the same ms share that poll: it must look at the
    queue as of the later one's visibility. Keeping the first one's view left the second message
    unseen until another message's poll: the steady run's 24 s outlier (10,000 tasks, seed 1;
    max 738 ms after the fix)."""
    from punctual.bench.punctual_sim import PunctualSim
    from punctual.bench.scenarios import Scenario

    sim = PunctualSim(Scenario("t", "", [0], [60_000], 120_000), Models(), seed=1, backend="fake")
    polls: list[tuple[int, int | None]] = []
    sim.queue.poll = lambda view: polls.append((sim.engine.now, view))  # type: ignore[method-assign]
    t = sim.engine.now + 5_000
    sim.queue.schedule(t, t + 300)
    sim.queue.schedule(t, t + 700)  # the same poll ms, visible 400 ms later
    sim.queue.schedule(t, t + 100)
    sim.engine.run(t + 1)
    assert polls == [(t, t + 700)]


def test_a_report_names_the_command_that_reproduces_it(tmp_path):
    """The written command carries the strategies, the backend and every model override: a
    fake-backend result must not read as a moto one."""
    import argparse
    import json

    from punctual.bench.run import add_arguments, main

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--quick", "--scenario", "idle", "--strategy", "punctual", "--backend", "fake",
                         "--set", "cold_start_ms=0,0", "--no-plots", "--out", str(tmp_path)])
    assert main(args) == 0
    cmd = json.loads((tmp_path / "results-idle.json").read_text())["command"]
    assert cmd == ("punctual bench --quick --seed 1 --scenario idle --strategy punctual --backend fake"
                   " --set cold_start_ms=0,0")
    assert f"`{cmd}`" in (tmp_path / "results-idle.md").read_text()


def test_invariant_7_cost_per_task_in_a_burst():
    """Invariant 7 (docs/architecture.md), measured on 1,000 tasks due in the same second (fake backend, the real
    handlers): beyond the user's own put, 2 DynamoDB write units per task (the claim, and the
    delete after delivery: a conditional DeleteItem, 1 unit; the consumer's
    fence is one write per partition and due second, not per task: invariant 4, "Cancellation never
    lies"), SQS sends and deletes in batches of 10, queries paginated, no scan.

    Reads are ~1.06-1.08 per task (by the stream model's draws): the editor's consistent read of the meta row once per stream batch
    (inserts spread over time make one batch per insert, ~0.95) and the consumer's consistent Query
    of each run's key range (~0.1: 4 KB a unit). The consumer's reads and fences are per run, its
    deletes per row (1 write unit each, where a transaction's delete costs 2). The 1,000 rows due together travel as four delay-queue messages of 250
    rows (groups) in one SendMessageBatch, spread over consumer invocations (hand-off).
    Pinned here so that none of it can grow unnoticed."""
    (r,) = run_scenario("burst", seed=1, quick=True, models=Models(), strategies=("punctual",), backend="fake")
    n = r.n
    assert summarize(r).delivered == n == 1_000
    calls = dict(r.requests)
    user_puts = calls.pop(("user", "dynamodb.PutItem"))
    assert user_puts == n
    writes = r.ddb_wru - user_puts
    assert writes / n <= 2.01, writes / n  # claim + conditional delete, plus fences and arming writes
    assert r.ddb_rru / n <= 1.08, r.ddb_rru / n
    delivering = sum(1 for inv in r.invocations if inv.fn == "consumer" and inv.sent)
    # a fence per invocation and due second: the 1,000 dues span one second, which may straddle two
    assert 1 <= delivering <= 4 and calls[("consumer", "dynamodb.UpdateItem")] <= 2 * delivering
    assert calls[("consumer", "dynamodb.Query")] <= 25  # one per run (rows due within 10 ms) and consumer: 21 at seed 1
    assert calls[("consumer", "dynamodb.DeleteItem")] == n  # a conditional delete a row, none twice
    assert ("consumer", "dynamodb.TransactWriteItems") not in calls and ("consumer", "dynamodb.GetItem") not in calls
    assert calls[("poller", "sqs.SendMessageBatch")] == 1  # four group messages of 250 rows, one call
    ops = {api for _, api in calls}
    assert "dynamodb.Scan" not in ops
    sends = sum(c for (_, api), c in calls.items() if api == "sqs.SendMessageBatch")
    assert "sqs.SendMessage" not in ops
    assert sends <= 2 * (n / 10) * 1.1  # delay queue + delivery queue, ~10 per call
    deletes = sum(c for (_, api), c in calls.items() if api == "sqs.DeleteMessageBatch")
    assert deletes <= (n / 10) * 1.1


def test_an_invocation_longer_than_its_functions_timeout_is_counted():
    """The simulator lets an invocation run past the construct's timeout (it does not model the
    kill): such a run is counted, so figures a real deployment could not give are visible."""
    from punctual.bench.models import Models
    from punctual.bench.punctual_sim import TIMEOUT_S
    from punctual.deployment import EDITOR_TIMEOUT_S
    from tests.bench.sim_support import bare_sim

    assert TIMEOUT_S["editor"] == EDITOR_TIMEOUT_S
    sim = bare_sim(Models())
    for ms in (EDITOR_TIMEOUT_S * 1000, EDITOR_TIMEOUT_S * 1000 + 1):
        sim._invoke("editor", sim.engine.now, lambda _context, _deps, ms=ms: sim.engine.advance(sim.engine.now + ms), lambda proc: None)
        sim.engine.run(sim.engine.now + 60_000)
    assert sim.result.counters["past_timeout:editor"] == 1  # the one 1 ms over


def test_each_simulated_invocation_gets_its_functions_deadline():
    """The simulated invocation's Lambda context gives its function's timeout, from which the handler
    sets the deadline (runtime.start_invocation): the code's own guards (send.CHUNK_RESERVE_MS, the
    consumer's wait bound) act in the benchmark as they would in a deployment."""
    from punctual.bench.models import Models
    from punctual.bench.punctual_sim import TIMEOUT_S
    from punctual.core.retry import time_left_ms
    from punctual.core.runtime import start_invocation
    from tests.bench.sim_support import bare_sim

    sim = bare_sim(Models())
    left: dict[str, int | None] = {}

    def handler_start(fn, context, deps):  # what each handler does first
        start_invocation(context, deps)
        left[fn] = time_left_ms(deps.clock)

    for fn in ("poller", "editor"):
        sim._invoke(fn, sim.engine.now, lambda context, deps, fn=fn: handler_start(fn, context, deps),
                    lambda proc: None)
        sim.engine.run(sim.engine.now + 1_000)
    assert left == {"poller": TIMEOUT_S["poller"] * 1000, "editor": TIMEOUT_S["editor"] * 1000}
