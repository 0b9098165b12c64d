"""Redrive: a rejected-rows queue message -> the fresh row to put back, or why it cannot be.

Pure decisions, no I/O: the client (``PunctualClient.redrive``) receives the messages, writes the
rows and deletes the messages. A fresh row is the rejected row without Punctual's bookkeeping
(every ``punctual_*`` attribute: an ``undeliverable`` row put back with its ``punctual_attempt``
would be rejected again), its binary restored from the message's base64 text, and valid by the
very check the editor and the poller run (``models.task_from_item``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from .models import Rejection, RowRejected, task_from_item

BOOKKEEPING_PREFIX = "punctual_"
# What Rejection._fit / Rejection.body leave in place of what they cut (messages written before
# Rejection.item_complete existed say so only by these).
TRUNCATION_MARKERS = ("_omitted_bytes", "_truncated")

# Why a message stays on the queue (RedriveLeft.why)
UNREADABLE = "unreadable"  # not a rejection record
SKIPPED = "skipped"  # its code is not one of those asked for
OTHER_TABLE = "other_table"  # rejected from another table
TRUNCATED = "truncated"  # the row did not fit the message: it cannot be rebuilt
INVALID = "invalid"  # still not a valid task once its bookkeeping is stripped
EXISTS = "exists"  # a row with that key is in the table: the newer row wins


class NotRedrivable(ValueError):
    def __init__(self, why: str, detail: str):
        super().__init__(f"{why}: {detail}")
        self.why = why
        self.detail = detail


def parse_rejection(body: str) -> Rejection:
    """A rejected-rows queue body as a :class:`Rejection`, or :class:`NotRedrivable` (unreadable)."""
    try:
        return Rejection.model_validate(json.loads(body))
    except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
        raise NotRedrivable(UNREADABLE, f"not a rejection record: {str(exc).splitlines()[0][:200]}") from exc


def fresh_row(rejection: Rejection, partitions: str | Collection[str], table: str,
              codes: Collection[str] | None = None) -> dict[str, Any]:
    """The row to put back for ``rejection`` (attribute values, binary as bytes), or
    :class:`NotRedrivable` saying why it stays on the queue."""
    if codes is not None and rejection.code not in codes:
        raise NotRedrivable(SKIPPED, f"code {rejection.code!r} not asked for")
    if rejection.table is not None and rejection.table != table:
        raise NotRedrivable(OTHER_TABLE, f"rejected from table {rejection.table!r}, not {table!r}")
    item = rejection.item
    if not rejection.item_complete or any(marker in item for marker in TRUNCATION_MARKERS):
        raise NotRedrivable(TRUNCATED, "the rejection carries only part of the row (too big for one SQS message)")
    row = {name: restore_binary(av) for name, av in item.items() if not name.startswith(BOOKKEEPING_PREFIX)}
    try:
        task_from_item(row, partitions)
    except RowRejected as exc:
        raise NotRedrivable(INVALID, f"{exc.code}: {exc.reason}") from exc
    return row


def restore_binary(av: Any) -> Any:
    """An attribute value as queued (binary as base64 text) -> as DynamoDB takes it (bytes)."""
    if not isinstance(av, dict) or len(av) != 1:
        return av  # not an attribute value: task_from_item says what is wrong
    (tag, value), = av.items()
    if tag == "B":
        return {"B": _bytes(value)}
    if tag == "BS" and isinstance(value, list):
        return {"BS": [_bytes(v) for v in value]}
    if tag == "M" and isinstance(value, dict):
        return {"M": {k: restore_binary(v) for k, v in value.items()}}
    if tag == "L" and isinstance(value, list):
        return {"L": [restore_binary(v) for v in value]}
    return av


def _bytes(text: Any) -> bytes:
    if isinstance(text, (bytes, bytearray)):
        return bytes(text)
    try:
        return base64.b64decode(str(text), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NotRedrivable(INVALID, f"binary value is not base64: {str(text)[:40]!r}") from exc
