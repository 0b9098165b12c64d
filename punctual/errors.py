"""Exceptions of the Punctual client."""

from __future__ import annotations


class PunctualError(Exception):
    """Base class of every error the client raises on purpose."""


class InvalidSchedule(PunctualError, ValueError):
    """The request cannot become a valid row (time, id or payload); nothing was written."""

    def __init__(self, message: str, code: str = "invalid"):
        super().__init__(message)
        self.code = code


class NotFound(PunctualError, LookupError):
    """No pending task has this key, and its due time has not come yet (never scheduled,
    or cancelled / rescheduled already)."""

    def __init__(self, key: str, message: str | None = None):
        super().__init__(message or f"no pending task {key!r}")
        self.key = key


class AlreadyDelivered(NotFound):
    """No pending task has this key and its due time has passed: it was delivered (or is
    being delivered right now). It may also have been cancelled or rejected earlier: once
    a row is gone the table cannot tell these apart. Subclass of :class:`NotFound`."""

    def __init__(self, key: str):
        super().__init__(key, f"task {key!r} is due already and no longer pending: delivered or being delivered")


class AlreadyEnqueued(AlreadyDelivered):
    """Direct delivery (the construct's ``delivery="direct"``): the task's event was sent to the
    delivery queue already, with the delay that makes it visible at its due time; it can no longer
    be stopped. A task is sent within ``window_seconds`` (at most 15 minutes) before it is due.
    Subclass of :class:`AlreadyDelivered`."""

    def __init__(self, key: str):
        NotFound.__init__(self, key, f"task {key!r} was sent to the delivery queue already (direct delivery): "
                                     "it can no longer be cancelled or moved")


class AlreadyExists(PunctualError):
    """A task with the same due millisecond and id exists: ids must be unique per ms."""

    def __init__(self, key: str):
        super().__init__(f"a task with key {key!r} exists already")
        self.key = key


class PartialWrite(PunctualError):
    """``schedule_many`` gave up with some rows unwritten (``unwritten``: their keys).
    Rows are keyed by (due, id): calling again with the same items is safe."""

    def __init__(self, written: list, unwritten: list[str]):
        super().__init__(f"{len(unwritten)} task(s) could not be written after retries")
        self.written = written
        self.unwritten = unwritten
