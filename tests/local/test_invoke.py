"""The local stack runs each function's real Lambda handler, with the function's own deps and a
Lambda-like context (so what the handler does first, and how it calls its use case, is what runs)."""

from __future__ import annotations

from types import SimpleNamespace

from punctual.local.invoke import LocalFunction
from punctual.local.provision import Function


def _function(handler: str) -> LocalFunction:
    spec = Function(logical_id="F", name="punctual-poller", arn="arn:aws:lambda:us-east-1:123456789012:function:p",
                    handler=handler, environment={"PUNCTUAL_TABLE_NAME": "t"})
    return LocalFunction(spec, "http://127.0.0.1:9", "us-east-1")


def test_the_poller_gets_the_rule_events_id_as_its_token(monkeypatch):
    """A retry of the rule's invocation carries the same event, so the same token: the poll then
    resends what its crashed attempt claimed (docs/architecture.md). The local stack used to pass
    the event as the deps once poll() took a second parameter."""
    fn = _function("punctual.functions.poller.handler.handler")
    seen = []
    monkeypatch.setattr(fn.module, "poll", lambda deps, token=None, scheduled_ms=None:
                        seen.append((deps, token, scheduled_ms)) or SimpleNamespace(summary=dict))
    event = {"id": "local-1-1", "detail-type": "Scheduled Event", "source": "aws.events", "time": "2027-01-01T00:03:00Z"}
    fn.invoke(event)
    fn.invoke(event)
    # and the minute it fired for, its PollDelayMs's start (latencies.scheduled_minute_ms)
    assert seen == [(fn.deps, "local-1-1", 1_798_761_780_000)] * 2


def test_the_consumer_gets_its_event_and_deps(monkeypatch):
    fn = _function("punctual.functions.consumer.handler.handler")
    seen = []
    monkeypatch.setattr(fn.module, "consume", lambda event, deps: seen.append((event, deps)) or {})
    fn.invoke({"Records": []})
    assert seen == [({"Records": []}, fn.deps)]


def test_the_handler_gets_a_context_with_the_functions_time_left(monkeypatch):
    """The handler binds the context's remaining time as the retry deadline (punctual.core.retry):
    locally too, so a local run retries as Lambda would."""
    from punctual.core import retry

    fn = _function("punctual.functions.consumer.handler.handler")
    left = []
    monkeypatch.setattr(fn.module, "consume", lambda event, deps: left.append(retry.time_left_ms(deps.clock)) or {})
    fn.invoke({"Records": []})
    assert left and 0 < left[0] <= fn.spec.timeout_s * 1000
