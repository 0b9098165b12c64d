"""End to end in virtual time: client and raw rows -> editor (stream) -> consumer -> delivery queue,
with the poller run whenever the rule fires (the AWS model: tests/virtual_aws.py)."""

from __future__ import annotations

from punctual.client import PunctualClient
from tests.functional.helpers import sk_at
from tests.support import T0_MS
from tests.virtual_aws import RECEIVE_LATENCY_MS, STEP_MS, VirtualAws

DAY = 86_400_000


def test_fast_path_cancel_and_reschedule_after_enqueue_then_far_row_via_the_rule(stack, frozen):
    sim = VirtualAws.over_moto(stack, frozen)
    client = PunctualClient(stack.settings.table_name, ddb=stack.ddb, clock=stack.deps.clock)
    stack.put_raw(sk_at(T0_MS + 5000, "raw5s"), {"n": "raw5s"})
    soon = client.schedule(T0_MS + 300, {"n": "c300ms"}, id="c300ms")
    client.schedule(T0_MS - 3_600_000, {"n": "cpast"}, id="cpast")
    cancel_me = client.schedule(T0_MS + 8000, {"n": "cancel"}, id="cancel")
    move_me = client.schedule(T0_MS + 6000, {"n": "move"}, id="move")
    far = client.schedule(T0_MS + 3 * DAY, {"n": "far"}, id="far")

    # the editor pushes the near rows to the delay queue at once (no poll); the consumer
    # delivers the past-due row and the one due in 300 ms (waiting to the ms) in that step
    sim.step()
    assert sim.log.invocations["editor"] == 1 and sim.log.polls == []
    assert [e["key"] for e in sim.delivered][1:] == [soon.key] and sim.now == soon.due_ms
    assert client.get(cancel_me).in_flight and client.get(move_me).in_flight
    assert not client.get(far).in_flight

    # cancel and reschedule AFTER the rows reached the delay queue
    client.cancel(cancel_me)
    moved = client.reschedule(move_me, T0_MS + 12_000)

    sim.run_until(T0_MS + 20_000)
    got = sim.delivered
    by_id = {e["id"]: e for e in got}
    assert sorted(e["id"] for e in got) == ["c300ms", "cpast", "move", "raw5s"], "each exactly once"
    assert by_id["move"]["due_ms"] == moved.due_ms and by_id["move"]["key"] == moved.key
    for e in got:
        assert e["delivered_at_ms"] >= e["due_ms"], "never early"
        assert e["payload"] == {"n": e["id"]}
    assert max(e["lateness_ms"] for e in got if e["id"] != "cpast") <= STEP_MS + RECEIVE_LATENCY_MS
    assert [t.id for t in client.list()] == ["far"]

    # the far row is sent by polls: the armed rule fires until the poll that covers it
    got = sim.settle(3 * DAY + 3_600_000)
    assert [e["id"] for e in got] == ["far"]
    assert 0 <= got[0]["lateness_ms"] <= STEP_MS + RECEIVE_LATENCY_MS
    assert sim.log.polls and sim.log.errors == [] and sim.log.violations == []
    assert stack.rows() == []
