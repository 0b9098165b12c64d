"""End to end in virtual time: client and raw rows -> editor (stream) -> consumer -> delivery queue,
with the poller run whenever the rule would fire."""

from __future__ import annotations

from datetime import UTC, datetime

from functions.core.arming import read_arm
from functions.editor.client import PunctualClient
from functions.editor.handler import process_stream
from functions.poller.handler import poll
from tests.consumer_support import delivered, receive_event, run_consumer
from tests.support import T0_MS, StreamReader

DAY = 86_400_000


def sk(due_ms: int, id: str) -> str:
    return f"{due_ms:013d}#{id}"


def drive(stack, reader, frozen, seconds: float, step: float = 0.5) -> list[dict]:
    """Let virtual time pass: the editor sees the stream, the consumer the delay queue."""
    got: list[dict] = []
    end = stack.deps.clock.now_ms() + int(seconds * 1000)
    while stack.deps.clock.now_ms() < end:
        assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}
        while (event := receive_event(stack))["Records"]:
            assert run_consumer(stack, event) == {"batchItemFailures": []}
            got += delivered(stack)
        frozen.tick(step)
    return got


def fire_rule(stack, frozen) -> None:
    """EventBridge fires the armed minute (some seconds in) and the poller runs."""
    armed = read_arm(stack.ddb, stack.settings, stack.deps.clock).armed_ms
    assert armed is not None and armed > stack.deps.clock.now_ms()
    frozen.move_to(datetime.fromtimestamp((armed + 10_000) / 1000, tz=UTC))
    poll(stack.deps)


def test_fast_path_cancel_and_reschedule_after_enqueue_then_far_row_via_the_rule(stack, frozen):
    reader = StreamReader(stack)
    client = PunctualClient(stack.settings.table_name, ddb=stack.ddb, clock=stack.deps.clock)
    stack.put_raw(sk(T0_MS + 5000, "raw5s"), {"n": "raw5s"})
    soon = client.schedule(T0_MS + 300, {"n": "c300ms"}, id="c300ms")
    client.schedule(T0_MS - 3_600_000, {"n": "cpast"}, id="cpast")
    cancel_me = client.schedule(T0_MS + 8000, {"n": "cancel"}, id="cancel")
    move_me = client.schedule(T0_MS + 6000, {"n": "move"}, id="move")
    far = client.schedule(T0_MS + 3 * DAY, {"n": "far"}, id="far")

    # the editor pushes the near rows to the delay queue at once (no poll)
    assert process_stream(reader.event(), stack.deps) == {"batchItemFailures": []}
    assert client.get(cancel_me).in_flight and client.get(move_me).in_flight and client.get(soon).in_flight
    assert not client.get(far).in_flight

    # cancel and reschedule AFTER the rows reached the delay queue
    client.cancel(cancel_me)
    moved = client.reschedule(move_me, T0_MS + 12_000)

    got = drive(stack, reader, frozen, 20)
    by_id = {e["id"]: e for e in got}
    assert sorted(e["id"] for e in got) == ["c300ms", "cpast", "move", "raw5s"], "each exactly once"
    assert by_id["move"]["due_ms"] == moved.due_ms and by_id["move"]["key"] == moved.key
    for e in got:
        assert e["delivered_at_ms"] >= e["due_ms"], "never early"
        assert e["payload"] == {"n": e["id"]}
    assert max(e["lateness_ms"] for e in got if e["id"] != "cpast") < 1000  # the 0.5 s step + delays
    assert [t.id for t in client.list()] == ["far"]

    # the far row is sent by polls: the armed rule fires until the poll that covers it
    for _ in range(5):
        fire_rule(stack, frozen)
        if client.get(far).in_flight:
            break
    assert client.get(far).in_flight
    got = drive(stack, reader, frozen, 16 * 60, step=5)
    assert [e["id"] for e in got] == ["far"]
    assert 0 <= got[0]["lateness_ms"] < 5000
    assert stack.rows() == []
