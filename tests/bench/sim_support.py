"""A simulator with nothing scheduled, to time calls a test makes inside one invocation."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from punctual.bench.models import Models
from punctual.bench.punctual_sim import PunctualSim
from punctual.bench.scenarios import Scenario


def bare_sim(models: Models) -> PunctualSim:
    """A fake-backend simulator, set up, with one task it will not run and no clock syncing."""
    sim = PunctualSim(Scenario("t", "", [0], [60_000], 120_000), models, seed=1, backend="fake")
    sim._setup_fake()
    sim.frozen = SimpleNamespace(move_to=lambda _: None)
    return sim


def time_in_consumer(sim: PunctualSim, calls: Callable[[], None]) -> int:
    """Virtual ms ``calls`` take when made by a consumer invocation of ``sim``."""
    took: dict[str, int] = {}

    def body(_context: object, _deps: object) -> None:
        start = sim.engine.now
        calls()
        took["ms"] = sim.engine.now - start

    sim._invoke("consumer", sim.engine.now, body, lambda proc: None)
    sim.engine.run(sim.engine.now + 60_000)
    return took["ms"]
