"""Punctual: precision one-off task scheduler for AWS serverless.

The client's names are loaded on first use, so the Lambda functions, which import only
:mod:`punctual.core`, do not pay for the client (or boto3) at cold start.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "PunctualClient": "punctual.client",
    "ScheduledTask": "punctual.client",
    "RedriveReport": "punctual.client",
    "RedriveLeft": "punctual.client",
    "AlreadyDelivered": "punctual.errors",
    "AlreadyEnqueued": "punctual.errors",
    "AlreadyExists": "punctual.errors",
    "InvalidSchedule": "punctual.errors",
    "NotFound": "punctual.errors",
    "PartialWrite": "punctual.errors",
    "PunctualError": "punctual.errors",
}
__all__ = [
    "AlreadyDelivered",
    "AlreadyEnqueued",
    "AlreadyExists",
    "InvalidSchedule",
    "NotFound",
    "PartialWrite",
    "PunctualClient",
    "PunctualError",
    "RedriveLeft",
    "RedriveReport",
    "ScheduledTask",
]

if TYPE_CHECKING:
    from punctual.client import PunctualClient, RedriveLeft, RedriveReport, ScheduledTask
    from punctual.errors import (
        AlreadyDelivered,
        AlreadyEnqueued,
        AlreadyExists,
        InvalidSchedule,
        NotFound,
        PartialWrite,
        PunctualError,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'punctual' has no attribute {name!r}")
    return getattr(import_module(module), name)
