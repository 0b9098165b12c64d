"""The local stack calls each function's use case as its Lambda handler would."""

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
    monkeypatch.setattr(fn.module, "poll", lambda deps, token=None: seen.append((deps, token)) or SimpleNamespace())
    event = {"id": "local-1-1", "detail-type": "Scheduled Event", "source": "aws.events"}
    fn.invoke(event, "poll")
    fn.invoke(event, "poll")
    assert seen == [(fn.deps, "local-1-1"), (fn.deps, "local-1-1")]


def test_the_consumer_gets_its_event_and_deps(monkeypatch):
    fn = _function("punctual.functions.consumer.handler.handler")
    seen = []
    monkeypatch.setattr(fn.module, "consume", lambda event, deps: seen.append((event, deps)) or {})
    fn.invoke({"Records": []}, "consume")
    assert seen == [({"Records": []}, fn.deps)]
