"""Fault injection through botocore's event hooks: crash, fail or throttle any AWS call.

``InjectedCrash`` derives from BaseException so that a handler's per-record
``except Exception`` cannot swallow it: it behaves like the process dying.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import ClientError


class InjectedCrash(BaseException):
    """The function instance died at this point."""


class Faults:
    """Register on one or more clients; count calls per operation; inject by rule."""

    def __init__(self, *clients: Any):
        self.calls: list[str] = []
        self._rules: list[tuple[str, str, Callable[[int], bool], Callable[[str], None]]] = []
        self._counts: dict[tuple[str, str], int] = {}
        for client in clients:
            svc = client.meta.service_model.service_name
            client.meta.events.register(f"before-call.{svc}", self._before)
            client.meta.events.register(f"after-call.{svc}", self._after)

    def _fire(self, when: str, model: Any) -> None:
        op = model.name
        self.calls.append(f"{when}:{op}") if when == "after" else None
        key = (when, op)
        self._counts[key] = self._counts.get(key, 0) + 1
        for rule_when, rule_op, pred, action in self._rules:
            if rule_when == when and rule_op in (op, "*") and pred(self._counts[key]):
                action(op)

    def _before(self, model: Any, **_: Any) -> None:
        self._fire("before", model)

    def _after(self, model: Any, **_: Any) -> None:
        self._fire("after", model)

    # -- rules --------------------------------------------------------------
    def crash_after(self, op: str, nth: int = 1) -> Faults:
        """Die right after the nth successful call of ``op`` (its effect happened)."""
        def die(o: str) -> None:
            raise InjectedCrash(f"crash after {o} #{nth}")
        self._rules.append(("after", op, lambda n: n == nth, die))
        return self

    def crash_before(self, op: str, nth: int = 1) -> Faults:
        """Die right before the nth call of ``op`` (its effect did not happen)."""
        def die(o: str) -> None:
            raise InjectedCrash(f"crash before {o} #{nth}")
        self._rules.append(("before", op, lambda n: n == nth, die))
        return self

    def fail(self, op: str, code: str = "InternalError", times: int = 1, first: int = 1) -> Faults:
        """Make calls ``first .. first+times-1`` of ``op`` fail with ``code`` (no effect)."""
        def err(o: str) -> None:
            raise ClientError({"Error": {"Code": code, "Message": "injected"}}, o)
        self._rules.append(("before", op, lambda n: first <= n < first + times, err))
        return self

    def throttle(self, op: str, times: int = 3, first: int = 1) -> Faults:
        return self.fail(op, "ThrottlingException", times, first)

    def count(self, op: str) -> int:
        return self._counts.get(("after", op), 0)

    def clear(self) -> None:
        self._rules.clear()


@contextmanager
def faults(*clients: Any):
    f = Faults(*clients)
    try:
        yield f
    finally:
        f.clear()
