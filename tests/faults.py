"""Fault injection through botocore's event hooks: crash, fail, throttle or delay any AWS call,
or make a service (a set of operations, optionally on one queue) fail between two virtual times.

Crash points can be enumerated: record the calls a handler makes in a clean run
(:meth:`Faults.recording` / :attr:`Faults.trace`), then :func:`crash_points` gives
"before/after the nth call of op" for each of them, to crash at in turn.

``InjectedCrash`` derives from BaseException so that a handler's per-record
``except Exception`` cannot swallow it: it behaves like the process dying.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from punctual.bench.outages import DDB_READS, DDB_WRITES, ERROR_KINDS, EVENTS_OPS, SQS_OPS, Outage
from punctual.lambda_events import InjectedCrash

# the outages are defined once, for these tests and the benchmark's faults scenario
__all__ = ["DDB_READS", "DDB_WRITES", "ERROR_KINDS", "EVENTS_OPS", "SQS_OPS", "CrashPoint", "Faults", "InjectedCrash",
           "Outage", "PartialFailSqs", "capture_sends", "crash_points", "fail_points", "faults"]


class Faults:
    """Register on one or more clients; count calls per operation; inject by rule."""

    def __init__(self, *clients: Any, enabled: bool = True):
        self.enabled = enabled
        self.fired: list[str] = []  # crashes / failures actually injected
        self.trace: list[str] = []  # every call made while enabled, in order (operation names)
        self.calls: list[str] = []
        self._rules: list[tuple[str, str, Callable[[int], bool], Callable[[str], None]]] = []
        self._outages: list[tuple[Outage, Callable[[], int]]] = []
        self._counts: dict[tuple[str, str], int] = {}
        for client in clients:
            svc = client.meta.service_model.service_name
            client.meta.events.register(f"before-parameter-build.{svc}", self._params)
            client.meta.events.register(f"before-call.{svc}", self._before)
            client.meta.events.register(f"after-call.{svc}", self._after)

    def _fire(self, when: str, model: Any) -> None:
        if not self.enabled:
            return
        op = model.name
        if when == "before":
            self.trace.append(op)
        self.calls.append(f"{when}:{op}") if when == "after" else None
        key = (when, op)
        self._counts[key] = self._counts.get(key, 0) + 1
        for rule_when, rule_op, pred, action in self._rules:
            if rule_when == when and rule_op in (op, "*") and pred(self._counts[key]):
                action(op)

    @staticmethod
    def _params(params: Any = None, context: Any = None, **_: Any) -> None:
        """botocore hands before-call the serialized request; keep the API parameters for it
        (the outages look at QueueUrl, and at the entries to fail them one by one)."""
        if isinstance(context, dict):
            context["punctual_params"] = params

    def _before(self, model: Any, context: Any = None, **_: Any) -> Any:
        self._fire("before", model)
        if not self._outages:
            return None
        params = (context or {}).get("punctual_params") or {}
        for outage, now in self._outages:
            if outage.covers(model.name, params, now()):
                self.fired.append(f"outage {model.name} ({outage.kind})")
                return outage.respond(model.name, params)
        return None

    def _after(self, model: Any, **_: Any) -> None:
        self._fire("after", model)

    # -- rules --------------------------------------------------------------
    def crash_after(self, op: str, nth: int = 1) -> Faults:
        """Die right after the nth successful call of ``op`` (its effect happened)."""
        def die(o: str) -> None:
            self.fired.append(f"after {o} #{nth}")
            raise InjectedCrash(f"crash after {o} #{nth}")
        self._rules.append(("after", op, lambda n: n == nth, die))
        return self

    def crash_before(self, op: str, nth: int = 1) -> Faults:
        """Die right before the nth call of ``op`` (its effect did not happen)."""
        def die(o: str) -> None:
            self.fired.append(f"before {o} #{nth}")
            raise InjectedCrash(f"crash before {o} #{nth}")
        self._rules.append(("before", op, lambda n: n == nth, die))
        return self

    def fail(self, op: str, code: str = "InternalError", times: int = 1, first: int = 1) -> Faults:
        """Make calls ``first .. first+times-1`` of ``op`` fail with ``code`` (no effect)."""
        def err(o: str) -> None:
            self.fired.append(f"fail {o} ({code})")
            raise ClientError({"Error": {"Code": code, "Message": "injected"}}, o)
        self._rules.append(("before", op, lambda n: first <= n < first + times, err))
        return self

    def throttle(self, op: str, times: int = 3, first: int = 1) -> Faults:
        return self.fail(op, "ThrottlingException", times, first)

    def delay(self, op: str, ms: int, clock: Any, times: int = 1_000_000, first: int = 1) -> Faults:
        """Make calls of ``op`` take ``ms`` of (virtual) time before they reach AWS."""
        def wait(o: str) -> None:
            clock.sleep_ms(ms)
        self._rules.append(("before", op, lambda n: first <= n < first + times, wait))
        return self

    def outage(self, outage: Outage, now_ms: Callable[[], int]) -> Faults:
        """Make ``outage``'s operations fail while ``outage.start_ms <= now_ms() < outage.end_ms``."""
        self._outages.append((outage, now_ms))
        return self

    def crash_at(self, point: CrashPoint) -> Faults:
        if point.when == "fail":
            # fails the call and every retry of it (call_with_retry tries 6 times): the handler sees the error
            return self.fail(point.op, "InternalError", times=7, first=point.nth)
        return (self.crash_before if point.when == "before" else self.crash_after)(point.op, point.nth)

    @contextmanager
    def active(self, reset: bool = True):
        """Inject (and count) only inside this block; counts restart from zero if ``reset``."""
        if reset:
            self._counts.clear()
            self.trace.clear()
        self.enabled = True
        try:
            yield self
        finally:
            self.enabled = False

    def count(self, op: str) -> int:
        return self._counts.get(("after", op), 0)

    def clear(self) -> None:
        self._rules.clear()
        self._outages.clear()

    def detach(self, *clients: Any) -> None:
        for client in clients:
            svc = client.meta.service_model.service_name
            client.meta.events.unregister(f"before-parameter-build.{svc}", self._params)
            client.meta.events.unregister(f"before-call.{svc}", self._before)
            client.meta.events.unregister(f"after-call.{svc}", self._after)


@dataclass(frozen=True)
class CrashPoint:
    when: str  # "before" | "after" (the process dies) | "fail" (the call fails, retries included)
    op: str
    nth: int

    def __str__(self) -> str:
        return f"{self.when} {self.op}#{self.nth}"


def crash_points(trace: list[str]) -> list[CrashPoint]:
    """Every crash point of a recorded call sequence: before and after each call, in order."""
    seen: dict[str, int] = {}
    points = []
    for op in trace:
        seen[op] = seen.get(op, 0) + 1
        points += [CrashPoint("before", op, seen[op]), CrashPoint("after", op, seen[op])]
    return points


def fail_points(trace: list[str]) -> list[CrashPoint]:
    """Every call of a recorded sequence, failing for good (an AWS error outlasting the retries)."""
    seen: dict[str, int] = {}
    points = []
    for op in trace:
        seen[op] = seen.get(op, 0) + 1
        points.append(CrashPoint("fail", op, seen[op]))
    return points


@contextmanager
def faults(*clients: Any):
    f = Faults(*clients)
    try:
        yield f
    finally:
        f.clear()


class PartialFailSqs:
    """Wraps the SQS client: chosen rows come back in ``Failed`` for their first ``times`` sends."""

    def __init__(self, real: Any, fail_sks: set[str], sender_fault: bool, times: int, field: str = "sk"):
        self.real, self.field = real, field  # field: the body's key naming the row (a pointer's "sk", an event's "key")
        self.left = dict.fromkeys(fail_sks, times)
        self.sender_fault = sender_fault
        self.failed_entries = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        ok, failed = [], []
        for e in Entries:
            key = json.loads(e["MessageBody"]).get(self.field)
            if self.left.get(key, 0) > 0:
                self.left[key] -= 1
                self.failed_entries += 1
                failed.append({"Id": e["Id"], "SenderFault": self.sender_fault,
                               "Code": "InvalidParameterValue" if self.sender_fault else "InternalError",
                               "Message": "injected"})
            else:
                ok.append(e)
        resp = self.real.send_message_batch(QueueUrl=QueueUrl, Entries=ok) if ok else {"Successful": []}
        return {**resp, "Failed": list(resp.get("Failed", [])) + failed}


def capture_sends(stack: Any) -> list[dict[str, Any]]:
    """Every message ``stack.sqs`` sends from now on, as sent: QueueUrl, MessageBody, DelaySeconds."""
    sent: list[dict[str, Any]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "SendMessage":
            sent.append({"QueueUrl": params["QueueUrl"], "MessageBody": params["MessageBody"],
                         "DelaySeconds": params.get("DelaySeconds", 0)})
        elif model.name == "SendMessageBatch":
            sent.extend({"QueueUrl": params["QueueUrl"], "MessageBody": e["MessageBody"],
                         "DelaySeconds": e.get("DelaySeconds", 0)} for e in params["Entries"])

    stack.sqs.meta.events.register("provide-client-params.sqs", record)
    return sent
