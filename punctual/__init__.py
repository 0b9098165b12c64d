"""Punctual: precision one-off task scheduler for AWS serverless."""

__version__ = "0.1.0"

from functions.editor.client import PunctualClient, ScheduledTask  # noqa: E402,F401
from functions.editor.errors import (  # noqa: E402,F401
    AlreadyDelivered,
    AlreadyExists,
    InvalidSchedule,
    NotFound,
    PartialWrite,
    PunctualError,
)
