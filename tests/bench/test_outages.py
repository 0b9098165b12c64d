"""The benchmark's faults scenario takes each service down in turn, for 5 and for 30 minutes
(issue 28), with the outages of punctual/bench/outages.py the tests use too."""

from __future__ import annotations

from punctual.bench.models import Models
from punctual.bench.punctual_sim import PunctualSim
from punctual.bench.scenarios import OUTAGE_MINUTES, OUTAGE_SERVICES, after_recovery_ms, build, outage_schedule

HOUR = 3_600_000


def test_the_schedule_takes_each_service_down_for_each_length_in_turn():
    plan = outage_schedule(12 * HOUR)
    assert [(s, (end - start) // 60_000) for s, start, end in plan] == [
        (s, m) for m in OUTAGE_MINUTES for s in OUTAGE_SERVICES]
    starts = [start for _, start, _ in plan]
    assert starts == sorted(starts) and starts[0] > 0 and plan[-1][2] < 12 * HOUR
    assert all(a[2] < b[1] for a, b in zip(plan, plan[1:], strict=False))  # one at a time


def test_lateness_is_measured_from_the_recovery_for_tasks_due_before_it():
    outages = [("eventbridge", 10 * HOUR, 10 * HOUR + 30 * 60_000)]
    lead = 120_000
    end = outages[0][2]
    assert after_recovery_ms(5 * HOUR, 5 * HOUR + 40, outages, lead) == 40  # far from it: from its due
    assert after_recovery_ms(10 * HOUR + 60_000, end + 70_000, outages, lead) == 70_000  # during: from the end
    assert after_recovery_ms(end + lead - 1, end + lead + 9, outages, lead) == 10  # due just after: its due


def test_every_task_of_the_quick_faults_scenario_keeps_the_outage_promise():
    """The outages alone (no random call failures or crashes): nothing lost or early, and every task
    at most 2 minutes after the later of its due time and the recovery."""
    sc = build("faults", 1, quick=True)
    assert len(sc.outages) == len(OUTAGE_SERVICES) * len(OUTAGE_MINUTES)
    r = PunctualSim(sc, Models(fault_call_failure_rate=0, fault_crash_rate=0), 1, backend="fake").run()
    assert len(r.deliveries) == sc.n
    assert all(min(times) >= sc.dues[i] for i, times in r.deliveries.items())
    assert r.counters["outage_call_failures"] > 0  # the outages met the functions
    assert r.counters["outage_promise_broken"] == 0, r.counters["outage_max_late_after_recovery_ms"]
