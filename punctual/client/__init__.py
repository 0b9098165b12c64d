"""Python client for services: schedule, list, cancel and reschedule tasks.

The client writes exactly the documented row (``pk`` S, ``sk`` S ``"<13-digit ms>#<id>"``,
``payload`` M) and validates it with the same code the stream handler uses, so a
client insert and a raw insert are the same thing. The key (``sk``) returned by
:meth:`PunctualClient.schedule` is the task's handle for get/cancel/reschedule.

:class:`PunctualClient` is one class made of one part per thing a user does, each in its module
over the table they share (``table.TaskTable``: settings, partition rules, AWS clients, building
and reading a row):

- ``scheduling.py``: schedule, schedule_many;
- ``lookups.py``: get, find, list, count;
- ``cancelling.py``: cancel, reschedule;
- ``redriving.py``: redrive (and its report);
- ``tasks.py``: what they take and give (due times, task handles, :class:`ScheduledTask`).
"""

from __future__ import annotations

# the client's errors, importable from here as they always were (their home: punctual.errors)
from punctual.errors import (  # noqa: F401
    AlreadyDelivered,
    AlreadyEnqueued,
    AlreadyExists,
    InvalidSchedule,
    NotFound,
    PartialWrite,
    PunctualError,
)

from .cancelling import Cancelling
from .lookups import Lookups
from .redriving import REDRIVE_VISIBILITY_S, RedriveLeft, RedriveReport, Redriving
from .scheduling import BATCH_WRITE, Scheduling
from .tasks import MIN_PLAUSIBLE_MS, ScheduledTask, When, task_key, to_due_ms

__all__ = ["BATCH_WRITE", "MIN_PLAUSIBLE_MS", "REDRIVE_VISIBILITY_S", "PunctualClient", "RedriveLeft",
           "RedriveReport", "ScheduledTask", "When", "task_key", "to_due_ms"]


class PunctualClient(Scheduling, Lookups, Cancelling, Redriving):
    """Schedule one-off tasks in a Punctual table.

    ``ddb`` is a boto3 low-level DynamoDB client (created with ``boto3.client("dynamodb")``
    on first use when omitted); ``clock`` only matters for retries and for telling
    :class:`AlreadyDelivered` from :class:`NotFound`.

    ``delivery`` and ``window_seconds``: the deployment's (construct props ``delivery`` and
    ``window``). In direct delivery a task that is no longer pending and due within the window is
    reported as :class:`AlreadyEnqueued` (sent, or cancelled before: the table cannot tell), not
    :class:`NotFound`. They never change what a cancel does, only which error names a missing row:
    a cancel that returns stopped the delivery whatever they say.
    """
