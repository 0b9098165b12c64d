"""Editor: the Python client for services and the Lambda for the table's stream."""

from .client import PunctualClient, ScheduledTask
from .errors import AlreadyDelivered, AlreadyExists, InvalidSchedule, NotFound, PartialWrite, PunctualError

__all__ = [
    "AlreadyDelivered",
    "AlreadyExists",
    "InvalidSchedule",
    "NotFound",
    "PartialWrite",
    "PunctualClient",
    "PunctualError",
    "ScheduledTask",
]
