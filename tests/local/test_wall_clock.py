"""The local drivers' timeline (punctual.local.drivers.WallClock): actions in time order on its
thread, one whose time has passed at once, answers from a pool back on the timeline, stop."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from punctual.local.drivers import WallClock


def _started() -> WallClock:
    clock = WallClock("test-clock")
    clock.start()
    return clock


def test_actions_run_in_time_order_on_the_timeline_thread() -> None:
    clock = _started()
    ran: list[tuple[str, int, str]] = []
    finished = threading.Event()
    now = clock.now_ms()

    def note(label: str) -> None:
        ran.append((label, clock.now_ms(), threading.current_thread().name))
        if len(ran) == 4:
            finished.set()

    try:
        clock.at(now + 150, lambda: note("c"))  # scheduled first, due last
        clock.at(now + 50, lambda: note("a"))
        clock.at(now + 100, lambda: note("b"))
        clock.at(now + 100, lambda: note("b2"))  # the same time: in the order scheduled
        assert finished.wait(5), ran
    finally:
        clock.stop()
        clock.join(5)
    assert [label for label, _, _ in ran] == ["a", "b", "b2", "c"]
    assert all(t >= now + due for (_, t, _), due in zip(ran, (50, 100, 100, 150), strict=True))
    assert {thread for _, _, thread in ran} == {"test-clock"}


def test_an_action_scheduled_in_the_past_runs_at_once() -> None:
    clock = _started()
    done = threading.Event()
    try:
        t0 = time.monotonic()
        clock.at(clock.now_ms() - 60_000, done.set)
        assert done.wait(5)
        assert time.monotonic() - t0 < 0.5
    finally:
        clock.stop()
        clock.join(5)


def test_work_on_a_pool_answers_on_the_timeline() -> None:
    clock = _started()
    got: list[tuple[Any, Any, str]] = []
    answered = threading.Event()

    def done(result: Any, error: BaseException | None) -> None:
        got.append((result, error, threading.current_thread().name))
        if len(got) == 2:
            answered.set()

    def boom() -> None:
        raise ValueError("boom")

    with ThreadPoolExecutor(2) as pool:
        try:
            clock.run_on(pool, lambda: 42, done)
            clock.run_on(pool, boom, done)
            assert answered.wait(5)
        finally:
            clock.stop()
            clock.join(5)
    assert sorted(repr(r) for r, _, _ in got) == ["42", "None"]
    assert [type(e).__name__ for _, e, _ in got if e is not None] == ["ValueError"]
    assert {thread for _, _, thread in got} == {"test-clock"}


def test_stop_ends_the_thread_and_drops_what_is_not_due() -> None:
    clock = _started()
    ran = threading.Event()
    clock.at(clock.now_ms() + 60_000, ran.set)
    clock.stop()
    clock.join(5)
    assert not clock.thread.is_alive()
    assert not ran.is_set()


def test_stop_waits_for_work_on_the_pool_and_runs_its_answer() -> None:
    clock = _started()
    release = threading.Event()
    answers: list[Any] = []
    with ThreadPoolExecutor(1) as pool:
        clock.run_on(pool, lambda: release.wait(5) and "answer", lambda r, e: answers.append(r))
        clock.stop()
        clock.join(0.2)
        assert clock.thread.is_alive()  # the invocation is still running
        release.set()
        clock.join(5)
    assert not clock.thread.is_alive()
    assert answers == ["answer"]
