"""Consumer Lambda: a delay-queue batch -> consume it -> the batch item failures.

The algorithm is the use case :mod:`punctual.core.usecases.consume`; the mechanisms and the
invariants they keep are in docs/architecture.md.
"""

from __future__ import annotations

from typing import Any

from punctual.core.runtime import Deps, default_deps, start_invocation
from punctual.core.usecases.consume import consume

__all__ = ["handler", "consume"]


def handler(event: dict[str, Any], context: Any, deps: Deps | None = None) -> dict[str, Any]:
    """``deps``: Lambda passes none (built from the environment); the local stack passes its own."""
    deps = deps or default_deps("consumer")
    start_invocation(context, deps)
    return consume(event, deps)
