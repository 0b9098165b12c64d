"""Poller Lambda: the rule's invocation -> one poll -> its summary; in direct delivery, the control
topic's (SNS) -> arm the poll it asks for.

The algorithm is the use case :mod:`punctual.core.usecases.poll`; the mechanisms and the
invariants they keep are in docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from punctual.core.latencies import scheduled_minute_ms
from punctual.core.runtime import Deps, default_deps, start_invocation
from punctual.core.usecases.poll import invocation_token, poll
from punctual.core.usecases.serve_controls import is_control_event, serve_controls

__all__ = ["handler", "poll"]


def handler(event: dict[str, Any], context: Any, deps: Deps | None = None) -> dict[str, Any]:
    """``deps``: Lambda passes none (built from the environment); the local stack passes its own."""
    deps = deps or default_deps("poller")
    start_invocation(context, deps)
    if is_control_event(event):
        return serve_controls(event, deps)
    return poll(deps, token=invocation_token(event, context), scheduled_ms=scheduled_minute_ms(event)).summary()
