"""A rejection always fits in one SQS message, even for a 400 KB row."""

from __future__ import annotations

import json

from punctual.core.models import MAX_REJECTION_BYTES, Rejection, RowRejected


def test_small_rejection_carries_the_whole_row():
    item = {"pk": {"S": "scheduler"}, "sk": {"S": "bad"}, "payload": {"S": "x"}}
    body = json.loads(Rejection.of(item, RowRejected("malformed", "why"), "editor", 0).body())
    assert body["item"] == item and body["code"] == "malformed"


def test_huge_rejection_is_cut_to_the_key():
    item = {"pk": {"S": "scheduler"}, "sk": {"S": "1798761605000#big"},
            "payload": {"M": {"blob": {"S": "x" * 390_000}}}, "other": {"N": "1"}}
    text = Rejection.of(item, RowRejected("oversize", "too big"), "editor", 0).body()
    assert len(text.encode()) <= MAX_REJECTION_BYTES
    body = json.loads(text)
    assert body["code"] == "oversize" and body["sk"] == "1798761605000#big"
    assert body["item"]["sk"] == {"S": "1798761605000#big"}
    assert body["item"]["_truncated"]["attributes"] == ["other", "payload", "pk", "sk"]
