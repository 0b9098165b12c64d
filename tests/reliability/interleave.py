"""Deterministic interleaving of real, blocking code: one thread per actor, one baton.

Each actor runs in its own thread but only while it holds the baton. Before every
AWS call the fake (:class:`~tests.reliability.fakeaws.GatedAws`) calls
:meth:`Interleaver.gate`, which hands the baton back; the driver then picks the
next actor with ``choose`` (a hypothesis draw), so every interleaving at the
granularity of AWS calls can be generated and shrunk.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Actor:
    name: str
    fn: Callable[[], Any]
    thread: threading.Thread | None = None
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    steps: int = 0


@dataclass
class Interleaver:
    actors: dict[str, _Actor] = field(default_factory=dict)
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _turn: str | None = None
    _parked: set[str] = field(default_factory=set)
    trace: list[str] = field(default_factory=list)

    def gate(self, op: str) -> None:
        me = threading.current_thread().name
        if me not in self.actors:
            return  # the driver itself (setup, checks): no interleaving
        with self._cv:
            self.trace.append(f"{me}:{op}")
            self._turn = None
            self._parked.add(me)
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._turn == me)
            self._parked.discard(me)

    def _body(self, actor: _Actor) -> None:
        with self._cv:
            self._parked.add(actor.name)
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._turn == actor.name)
            self._parked.discard(actor.name)
        try:
            actor.result = actor.fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the driver
            actor.error = exc
        finally:
            with self._cv:
                actor.done = True
                self._turn = None
                self._cv.notify_all()

    def run(
        self,
        actors: dict[str, Callable[[], Any]],
        choose: Callable[[list[str]], str],
        between: Callable[[], None] | None = None,
        max_steps: int = 10_000,
    ) -> dict[str, _Actor]:
        """Run ``actors`` to completion, ``choose`` picking who moves at each step."""
        self.actors = {name: _Actor(name, fn) for name, fn in actors.items()}
        for a in self.actors.values():
            a.thread = threading.Thread(target=self._body, args=(a,), name=a.name, daemon=True)
            a.thread.start()
        for _ in range(max_steps):
            with self._cv:
                settled = self._cv.wait_for(
                    lambda: self._turn is None
                    and all(a.done or a.name in self._parked for a in self.actors.values()),
                    timeout=30,
                )
                if not settled:
                    raise RuntimeError("an actor neither reached a gate nor finished within 30 s")
                ready = sorted(a.name for a in self.actors.values() if not a.done and a.name in self._parked)
                if not ready:
                    break
            if between is not None:
                between()
            pick = choose(ready)
            with self._cv:
                self.actors[pick].steps += 1
                self._turn = pick
                self._cv.notify_all()
        else:
            raise RuntimeError("interleaving did not finish")
        for a in self.actors.values():
            a.thread.join(timeout=10)
        return self.actors
