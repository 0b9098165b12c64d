"""Sort keys: ``"<13-digit epoch ms>#<id>"`` (the cdk-scheduler row format).

Pure. ``decode_sk`` accepts exactly that shape and rejects everything else with a
machine-readable ``code`` and a human reason, so an operator can see *why* a row
was refused.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MS_DIGITS = 13
SEPARATOR = "#"
# 2200-01-01T00:00:00Z in ms: EventBridge cron years stop at 2199.
MAX_DUE_MS = 7_258_118_400_000
MAX_ID_CHARS = 512
# DynamoDB sort keys are at most 1024 bytes; 13 digits + '#' leave 1010.
MAX_ID_BYTES = 1010

_DIGITS = re.compile(r"[0-9]+")
_ISO_LIKE = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]")


class InvalidKey(ValueError):
    """A sort key that is not ``<13-digit ms>#<id>``; ``code`` names the rule broken."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SortKey:
    due_ms: int
    id: str

    @property
    def sk(self) -> str:
        return encode_sk(self.due_ms, self.id)


def validate_id(task_id: object) -> str:
    if not isinstance(task_id, str):
        raise InvalidKey("bad_id", f"id must be a string, got {type(task_id).__name__}")
    if task_id == "":
        raise InvalidKey("missing_id", "id is empty")
    if len(task_id) > MAX_ID_CHARS or len(task_id.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        raise InvalidKey("bad_id", f"id longer than {MAX_ID_CHARS} characters / {MAX_ID_BYTES} bytes")
    for ch in task_id:
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cs", "Cn") or ch in "\u2028\u2029":
            raise InvalidKey("bad_id", f"id contains a control or invalid character U+{ord(ch):04X}")
    return task_id


def validate_due_ms(due_ms: object) -> int:
    if isinstance(due_ms, bool) or not isinstance(due_ms, int):
        raise InvalidKey("bad_time", f"due time must be integer epoch ms, got {type(due_ms).__name__}")
    if due_ms < 0:
        raise InvalidKey("negative", "due time is negative")
    if due_ms >= MAX_DUE_MS:
        raise InvalidKey("year_out_of_range", "due time is after 2199-12-31T23:59:59.999Z")
    return due_ms


def encode_sk(due_ms: int, task_id: str) -> str:
    """``encode_sk(1733000000000, "a") == "1733000000000#a"``; validates both parts."""
    validate_due_ms(due_ms)
    validate_id(task_id)
    return f"{due_ms:0{MS_DIGITS}d}{SEPARATOR}{task_id}"


def decode_sk(sk: object) -> SortKey:
    """Parse a sort key or raise :class:`InvalidKey` with the reason."""
    if not isinstance(sk, str):
        raise InvalidKey("not_a_string", f"sk must be a string, got {type(sk).__name__}")
    if sk == "":
        raise InvalidKey("malformed", "sk is empty")
    if _ISO_LIKE.match(sk):
        raise InvalidKey("iso_string", "sk starts with an ISO date; expected <13-digit epoch ms>#<id>")
    if sk.startswith("-"):
        raise InvalidKey("negative", "sk starts with a negative number")
    head, sep, task_id = sk.partition(SEPARATOR)
    if not _DIGITS.fullmatch(head):
        raise InvalidKey("malformed", "sk must start with 13 digits of epoch ms followed by '#'")
    if len(head) == 10:
        raise InvalidKey("seconds_not_ms", "sk time has 10 digits: epoch seconds, expected 13-digit epoch ms")
    if len(head) != MS_DIGITS:
        raise InvalidKey("malformed", f"sk time has {len(head)} digits, expected {MS_DIGITS}")
    if not sep or task_id == "":
        raise InvalidKey("missing_id", "sk has no id after '#'")
    due_ms = validate_due_ms(int(head))
    return SortKey(due_ms, validate_id(task_id))


def window_upper_key(end_ms: int) -> str:
    """Smallest string greater than every key due at or before ``end_ms``.

    ``'$'`` sorts right after ``'#'``, so ``sk < window_upper_key(t)`` selects all
    keys ``<= t`` (and, being a plain prefix compare, malformed keys below it too).
    """
    return f"{end_ms:0{MS_DIGITS}d}$"


def after_window_key(end_ms: int) -> str:
    """Lower bound (inclusive) of keys due strictly after ``end_ms``."""
    return f"{end_ms + 1:0{MS_DIGITS}d}"


FENCE_PREFIX = "fence#"


def due_second(due_ms: int) -> int:
    """The start (epoch ms) of the second ``due_ms`` falls in."""
    return due_ms - due_ms % 1000


def fence_key(task_pk: str, due_ms: int) -> str:
    """The sort key, in the meta partition, of the delivery fence of partition ``task_pk``'s due
    second holding ``due_ms``: ``"fence#<task pk>#<second's epoch ms>"`` (docs/architecture.md,
    "Cancellation never lies")."""
    return f"{FENCE_PREFIX}{task_pk}{SEPARATOR}{due_second(due_ms)}"
