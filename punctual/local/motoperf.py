"""Removes two O(queue size) costs per SQS message from moto's server (same results, less CPU).

moto (5.x) recomputes every queue attribute, including the three ``ApproximateNumberOf*`` counts
that scan all of the queue's messages, for each message it sends (only to read
``ContentBasedDeduplication``) and, three times over, for each message it receives (only to read
``MessageRetentionPeriod``). With thousands of pointer messages waiting in the delay queue this
made every send and receive cost tens of milliseconds of CPU, and the local stack (one process,
one GIL) delivered a few tasks a second. This module patches, at run time and only in the local
stack's process, moto's classes so that:

- ``is_message_valid_based_on_retention_period`` reads the queue's retention period directly;
- while ``send_message`` runs, the three message counts read as 0 (``send_message`` never reads
  them: it reads ``ContentBasedDeduplication`` only);
- the SQS models' ``unix_time_millis()`` (read for every message on every receive, to test whether
  it is visible and not delayed) is ``time.time() * 1000`` instead of two datetime constructions
  (the same clock: both read the wall clock, and freezegun patches both).

What an SQS client sees is unchanged (``GetQueueAttributes`` still counts). moto's files are not
modified; if moto's internals differ from what is expected, nothing is patched.
"""

from __future__ import annotations

import threading
import time
from typing import Any

_COUNTS = ("approximate_number_of_messages", "approximate_number_of_messages_delayed",
           "approximate_number_of_messages_not_visible")
_state = threading.local()
_applied = False


def _skipping() -> bool:
    return getattr(_state, "depth", 0) > 0


def apply() -> bool:
    """Patch moto's SQS models once; True when the patch is (or already was) in place."""
    global _applied
    if _applied:
        return True
    try:
        import moto.sqs.models as sqs_models
        from moto.core.utils import unix_time
        from moto.sqs.exceptions import ReceiptHandleIsInvalid
        from moto.sqs.models import Message, Queue, SQSBackend
    except ImportError:
        return False
    if not all(isinstance(getattr(Queue, n, None), property) for n in _COUNTS) \
            or not hasattr(SQSBackend, "is_message_valid_based_on_retention_period") \
            or not hasattr(SQSBackend, "send_message") or not hasattr(sqs_models, "unix_time_millis") \
            or not hasattr(Queue, "delete_message") or not hasattr(Message, "all_receipt_handles"):
        return False

    for name in _COUNTS:
        original = getattr(Queue, name).fget

        def count(self: Any, _original: Any = original) -> int:
            return 0 if _skipping() else _original(self)

        setattr(Queue, name, property(count))

    send_message = SQSBackend.send_message

    def send_message_fast(self: Any, *args: Any, **kwargs: Any) -> Any:
        _state.depth = getattr(_state, "depth", 0) + 1
        try:
            return send_message(self, *args, **kwargs)
        finally:
            _state.depth -= 1

    def retention_ok(self: Any, queue_name: str, message: Any) -> bool:
        queue = self.get_queue(queue_name)
        retain_until = queue.message_retention_period + message.sent_timestamp / 1000
        return not retain_until <= unix_time()

    unix_time_millis = sqs_models.unix_time_millis

    def now_ms(dt: Any = None) -> float:
        return unix_time_millis(dt) if dt is not None else time.time() * 1000.0

    def delete_message(self: Any, receipt_handle: str) -> None:
        if receipt_handle in self.deleted_messages:
            return  # already deleted: deleting again succeeds, as in moto
        for i, message in enumerate(self._messages):
            if message.receipt_handle == receipt_handle or receipt_handle in message._old_receipt_handles:
                self.pending_messages.discard(message)
                self.deleted_messages.update(message.all_receipt_handles)
                del self._messages[i]
                return
        raise ReceiptHandleIsInvalid()

    sqs_models.unix_time_millis = now_ms
    # Monkeypatching moto's classes is the point of this module; mypy forbids assigning to methods.
    Queue.delete_message = delete_message  # type: ignore[method-assign]  # patch moto
    SQSBackend.send_message = send_message_fast  # type: ignore[method-assign]  # patch moto
    SQSBackend.is_message_valid_based_on_retention_period = retention_ok  # type: ignore[method-assign]  # patch moto
    _applied = True
    return True


_ddb_lock = threading.RLock()
_ddb_serialised = False


def serialise_dynamodb() -> bool:
    """Run moto's DynamoDB requests one at a time (the local stack's server is threaded).

    moto's ``transact_write_items`` deep-copies each table it names (to roll back) while other
    request threads may be writing to it: ``RuntimeError: dictionary changed size during
    iteration``, a 500 the client retries (the consumer's deletes after delivery are transactions:
    docs/architecture.md, "Cancellation never lies"). DynamoDB itself serialises a transaction
    against single-item writes; one lock around moto's DynamoDB handler does the same here (moto
    runs under one GIL: little is lost). True when in place."""
    global _ddb_serialised
    if _ddb_serialised:
        return True
    try:
        from moto.dynamodb.responses import DynamoHandler
    except ImportError:
        return False
    original = getattr(DynamoHandler, "call_action", None)
    if original is None:
        return False

    def call_action(self: Any) -> Any:
        with _ddb_lock:
            return original(self)

    DynamoHandler.call_action = call_action  # type: ignore[method-assign]  # patch moto
    _ddb_serialised = True
    return True
