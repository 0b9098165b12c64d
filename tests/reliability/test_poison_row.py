"""A row that kills whoever claims it (invariants 2 and 3, docs/architecture.md "A retry finishes
what a crashed attempt claimed"): a claim taken over from work that died adds no attempt, so such a
row would make every poll die for good and stall the schedule. After ``MAX_TAKEOVERS`` takeovers it
is rejected as undeliverable instead, and the rows it held back are delivered."""

from __future__ import annotations

from typing import Any

from punctual.core.keys import encode_sk
from punctual.core.planning import MAX_TAKEOVERS
from tests.faults import Faults, InjectedCrash
from tests.reliability.crashes import START, environment, put_row

MINUTE = 60_000
DUES = {"before": START + 3 * MINUTE, "poison": START + 3 * MINUTE + 100, "after": START + 3 * MINUTE + 200,
        "hours-later": START + 6 * 3_600_000}


def test_a_row_that_kills_every_claimer_is_rejected_and_the_schedule_goes_on():
    with environment("fake") as (world, _):
        poison = encode_sk(DUES["poison"], "poison")
        for fn in ("poller", "editor"):
            deps = world.isolate(fn)
            Faults(deps.ddb)  # keeps each call's parameters in its context

            def after(model: Any, context: Any = None, _fn: str = fn, **_: Any) -> None:
                params = (context or {}).get("punctual_params") or {}
                claim = model.name == "UpdateItem" and str(params.get("UpdateExpression", "")).startswith("SET #e")
                if claim and params.get("Key", {}).get("sk", {}).get("S") == poison:
                    raise InjectedCrash(f"{_fn} dies claiming the poison row")

            deps.ddb.meta.events.register("after-call.dynamodb", after)
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
