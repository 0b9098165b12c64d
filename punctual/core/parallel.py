"""Run independent AWS calls side by side: the one place the handlers use threads.

``pmap(fn, items, workers)`` maps ``fn`` over ``items`` with up to ``workers`` threads and
returns the results in order (an exception in any call is raised, as ``map`` would).

``lanes()`` is the width of the parallel section the caller is in (1 outside one). The
benchmark's simulator runs every section in order (``run_in_order``: one thread at a time, a
seed reproduces a run) and charges each call of a section ``1/lanes()`` of its modelled latency,
which is what ``lanes`` calls in flight at once cost in wall time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from threading import Event
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_lanes: ContextVar[int] = ContextVar("punctual_parallel_lanes", default=1)
_in_order = [False]  # process-wide: the simulator's handlers run on several (one at a time) threads


def lanes() -> int:
    return _lanes.get()


@contextmanager
def run_in_order() -> Iterator[None]:
    """Within this block ``pmap`` calls ``fn`` in order on the calling thread (``lanes()`` still
    reports the width a real run would have)."""
    before, _in_order[0] = _in_order[0], True
    try:
        yield
    finally:
        _in_order[0] = before


def pmap(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    todo = list(items)
    width = max(1, min(workers, len(todo)))
    if width == 1 or _in_order[0]:
        token = _lanes.set(width)
        try:
            return [fn(item) for item in todo]
        finally:
            _lanes.reset(token)
    token = _lanes.set(width)
    try:
        caller = copy_context()  # the workers see the caller's context (lanes, the retry deadline)
    finally:
        _lanes.reset(token)
    with ThreadPoolExecutor(max_workers=width) as pool:
        return list(pool.map(lambda item: caller.copy().run(fn, item), todo))


class Skipped(Exception):
    """Not tried: an earlier call of the same :func:`pmap_or_stop` had failed."""


def pmap_or_stop(fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[tuple[T, R | None, Exception | None]]:
    """Like :func:`pmap`, but a call that raises stops the calls not yet started (a failing service
    would cost each of them the retry policy's backoff): each item with its result, or with the
    exception it raised (:class:`Skipped` when it was not tried)."""
    stop = Event()

    def one(item: T) -> tuple[T, R | None, Exception | None]:
        if stop.is_set():
            return item, None, Skipped()
        try:
            return item, fn(item), None
        except Exception as exc:  # noqa: BLE001 - handed back to the caller, per item
            stop.set()
            return item, None, exc

    return pmap(one, items, workers)
