"""The in-memory AWS of the race and crash tests: :class:`punctual.bench.fakeaws.FakeAws` behind
boto3-like clients (``aws.ddb``, ``aws.sqs``, ``aws.events``).

Every call goes through :attr:`GatedAws.gate` first, so an
:class:`~tests.reliability.interleave.Interleaver` can park the calling thread and choose which
actor runs next: that is how hypothesis explores interleavings of the *real* handler code. The
clients also fire botocore's ``before-call`` / ``after-call`` events (tests/faults.py registers on
them to inject failures).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError

from punctual.bench.fakeaws import FakeAws


@dataclass
class GatedAws(FakeAws):
    gate: Callable[[str], None] = lambda op: None
    _clients: dict[str, _Client] = field(default_factory=dict, repr=False)

    def _client(self, service: str) -> _Client:
        # one per service, like boto3 clients: hooks registered on them stay
        if service not in self._clients:
            self._clients[service] = _Client(self, service)
        return self._clients[service]

    def clients_of_one_function(self) -> tuple[_Client, _Client, _Client, _Client]:
        """Fresh (dynamodb, sqs, events, sns) clients on this AWS: faults registered on them touch no
        other function and not the harness (VirtualAws.isolate)."""
        return _Client(self, "dynamodb"), _Client(self, "sqs"), _Client(self, "events"), _Client(self, "sns")

    @property
    def ddb(self) -> _Client:
        return self._client("dynamodb")

    @property
    def sqs(self) -> _Client:
        return self._client("sqs")

    @property
    def events(self) -> _Client:
        return self._client("events")

    @property
    def sns(self) -> _Client:
        return self._client("sns")

    def next_visible_ms(self, url: str) -> int | None:
        return min((m.visible_at for m in self.queue(url)), default=None)


class _Emitter:
    def __init__(self) -> None:
        self.handlers: dict[str, list[Callable[..., Any]]] = {}

    def register(self, event: str, handler: Callable[..., Any]) -> None:
        self.handlers.setdefault(event, []).append(handler)

    def unregister(self, event: str, handler: Callable[..., Any]) -> None:
        if handler in self.handlers.get(event, []):
            self.handlers[event].remove(handler)

    def emit(self, event: str, **kw: Any) -> Any:
        """Call every handler; the first answer that is not None (botocore's emit_until_response
        for before-call: a handler may answer the call instead of AWS)."""
        answer = None
        for handler in list(self.handlers.get(event, [])):
            got = handler(**kw)
            if answer is None and got is not None:
                answer = got
        return answer


class _Client:
    def __init__(self, aws: GatedAws, service: str):
        self._aws, self._service = aws, service
        self.meta = SimpleNamespace(service_model=SimpleNamespace(service_name=service), events=_Emitter())

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op.startswith("_"):
            raise AttributeError(op)

        def call(**kw: Any) -> Any:
            return self._call(op, kw)

        return call

    def _call(self, op: str, kw: dict[str, Any]) -> Any:
        aws = self._aws
        issued = aws.clock.now_ms()  # when the caller sent it (the gate may let time pass)
        aws.gate(op)
        aws.issued_ms = issued
        model = SimpleNamespace(name="".join(w.capitalize() for w in op.split("_")))
        context: dict[str, Any] = {}
        self.meta.events.emit(f"before-parameter-build.{self._service}", params=kw, model=model, context=context)
        answer = self.meta.events.emit(f"before-call.{self._service}", model=model, context=context)
        if answer is not None:  # a fault answered for AWS: (http, parsed)
            self.meta.events.emit(f"after-call.{self._service}", model=model)
            return answer[1]
        try:
            result = getattr(aws, "op_" + op)(**kw)
        except ClientError:
            self.meta.events.emit(f"after-call.{self._service}", model=model, context=context)
            raise
        self.meta.events.emit(f"after-call.{self._service}", model=model, context=context)
        return result
