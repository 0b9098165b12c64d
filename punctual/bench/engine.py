"""A discrete-event engine in virtual time that can run blocking code as processes.

One heap of events keyed by virtual ms. A *process* (a Lambda invocation running the real
handler) runs in its own thread, but only one thread ever runs at a time: when the
handler's clock sleeps, or an AWS call takes its modelled latency, the process hands control
back to the engine, which runs every event due before the process's new time first. So a
user insert that falls in the middle of a poll really happens between two of the poll's
calls. Nothing runs in parallel, so runs are reproducible for a seed.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable
from typing import Any


class Process:
    def __init__(self, engine: Engine, fn: Callable[[], Any], name: str, on_done: Callable[[Process], None]):
        self.engine, self.fn, self.name, self.on_done = engine, fn, name, on_done
        self.resume = threading.Semaphore(0)
        self.result: Any = None
        self.error: BaseException | None = None
        self.started_ms = 0
        self.ended_ms = 0
        self.info: dict[str, Any] = {}
        self.done = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        self.resume.acquire()
        try:
            self.result = self.fn()
        except BaseException as exc:  # a crash (InjectedCrash) or a handler error: Lambda sees a failure
            self.error = exc
        finally:
            self.done = True
            self.ended_ms = self.engine.now
            self.engine._current = None
            self.engine._back.release()


class Engine:
    def __init__(self, start_ms: int, on_time: Callable[[int], None] | None = None):
        self.now = start_ms
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self._current: Process | None = None
        self._back = threading.Semaphore(0)
        self._on_time = on_time
        self.events_run = 0

    # -- scheduling (a punctual.event_sources.Timeline) -------------------------------------------
    def now_ms(self) -> int:
        return self.now

    def at(self, t_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(int(t_ms), self.now), self._seq, action))

    def _set(self, t_ms: int) -> None:
        if t_ms != self.now:
            self.now = t_ms
            if self._on_time:
                self._on_time(t_ms)

    def run(self, until_ms: int) -> None:
        while self._heap and self._heap[0][0] <= until_ms:
            t, _, action = heapq.heappop(self._heap)
            self._set(t)
            self.events_run += 1
            action()

    # -- processes ----------------------------------------------------------------------------
    @property
    def current(self) -> Process | None:
        return self._current

    def spawn(self, t_ms: int, fn: Callable[[], Any], name: str, on_done: Callable[[Process], None]) -> None:
        def start() -> None:
            proc = Process(self, fn, name, on_done)
            proc.started_ms = self.now
            proc.thread.start()
            self._switch(proc)

        self.at(t_ms, start)

    def _switch(self, proc: Process) -> None:
        self._current = proc
        proc.resume.release()
        self._back.acquire()
        if proc.done:
            proc.thread.join()
            proc.on_done(proc)

    def advance(self, t_ms: int) -> None:
        """Called from inside a process: let virtual time reach ``t_ms``."""
        t_ms = int(t_ms)
        if t_ms <= self.now:
            return
        proc = self._current
        if proc is None:  # engine-side code (user inserts, pollers): instantaneous
            return
        if not self._heap or self._heap[0][0] > t_ms:
            self._set(t_ms)  # nothing else happens before: keep running
            return
        self.at(t_ms, lambda: self._switch(proc))
        self._current = None
        self._back.release()
        proc.resume.acquire()
        self._current = proc


class SimClock:
    """The project Clock over the engine: sleeping inside a handler advances virtual time."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def now_ms(self) -> int:
        return self.engine.now

    def sleep_ms(self, ms: int) -> None:
        if ms > 0:
            self.engine.advance(self.engine.now + int(ms))
