"""A row that kills whoever claims it (invariants 2 and 3, docs/architecture.md "A retry finishes
what a crashed attempt claimed"): a claim taken over from work that died adds no attempt, so such a
row would make every poll die for good and stall the schedule. After ``MAX_TAKEOVERS`` takeovers it
is rejected as undeliverable instead, and the rows it held back are delivered."""

from __future__ import annotations

from punctual.core.keys import encode_sk
from punctual.core.planning import MAX_TAKEOVERS
from tests.reliability.crashes import START, environment, put_row
from tests.reliability.outages import crash_after_claims

MINUTE = 60_000
DUES = {"before": START + 3 * MINUTE, "poison": START + 3 * MINUTE + 100, "after": START + 3 * MINUTE + 200,
        "hours-later": START + 6 * 3_600_000}


def test_a_row_that_kills_every_claimer_is_rejected_and_the_schedule_goes_on():
    with environment("fake") as (world, _):
        poison = encode_sk(DUES["poison"], "poison")
        for fn in ("poller", "editor"):
            crash_after_claims(world, fn, START, START + 8 * 3_600_000, sk=poison)
        for name, due in DUES.items():
            put_row(world, encode_sk(due, name), {"task": name})
        world.run_until(START + 8 * 3_600_000, stop=world.idle)
        good = {encode_sk(due, name): due for name, due in DUES.items() if name != "poison"}
        out = world.outcome(good)
        assert (out.lost, out.early, out.duplicates) == ([], [], 0)
        (rejected,) = world.log.rejected
        assert rejected["sk"] == poison and rejected["code"] == "undeliverable"
        assert f"{MAX_TAKEOVERS} claims whose work died" in rejected["reason"]
        late = {d.event["id"]: d.sent_ms - d.event["due_ms"] for d in out.deliveries}
        # the editor's bisected retries sent its neighbours on time; the row due hours later waits for
        # a poll that would die claiming the poison row first, but for its rejection
        assert late == {"before": 0, "after": 0, "hours-later": 0}
