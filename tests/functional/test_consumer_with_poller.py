"""The consumer on messages the real poller sent (claim-then-send, DelaySeconds = ceil)."""

from __future__ import annotations

from punctual.core.models import ATTR_ENQUEUED_MS
from punctual.core.usecases.poll import poll
from tests.consumer_support import delivered, receive_event, run_consumer, schedule
from tests.support import T0_MS


def test_poller_sends_consumer_delivers_each_once_never_early(stack, frozen):
    dues = {"past": T0_MS - 3_600_000, "soon": T0_MS + 300, "five": T0_MS + 5_250, "later": T0_MS + 61_999}
    for name, due in dues.items():
        schedule(stack, due, name, {"name": name})
    report = poll(stack.deps)
    assert report.sent == 4
    assert all(ATTR_ENQUEUED_MS in row for row in stack.rows())

    got = []
    for _ in range(70):  # step through a minute of virtual time, 1 s at a time
        event = receive_event(stack)
        if event["Records"]:
            assert run_consumer(stack, event) == {"batchItemFailures": []}
            got += delivered(stack)
        frozen.tick(1.0)
    assert sorted(e["id"] for e in got) == sorted(dues)
    for e in got:
        assert e["delivered_at_ms"] >= e["due_ms"] == dues[e["id"]]
        assert e["payload"] == {"name": e["id"]} and e["attempt"] == 1
    # DelaySeconds = ceil and the 1 s receive steps here bound the lateness to the step
    assert max(e["lateness_ms"] for e in got if e["id"] != "past") < 1_000
    assert stack.rows() == []
