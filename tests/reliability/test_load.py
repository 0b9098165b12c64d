"""Load: a poll reads only its window of a huge partition; a burst through the local stack.

- ``test_window_read_*``: N pending rows far in the future plus a few in the window;
  one poll, with every DynamoDB call counted (requests, items, pages, and read
  capacity estimated from the bytes read: 1 RCU per 4 KB per strongly consistent
  page). 20,000 rows in the normal suite, 200,000 behind ``-m long``.
- ``test_burst_local_stack`` (long): N rows (PUNCTUAL_LOAD_ROWS, default 20,000)
  due within the same 10 s, written to the embedded local stack (real time, real
  handlers, moto server); all delivered, none early; send / deliver rates and
  lateness printed.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from typing import Any

import pytest

from punctual.core.keys import encode_sk

T0 = 1_798_761_600_000
DAY = 86_400_000


def _item_bytes(item: dict[str, Any]) -> int:
    """DynamoDB item size: attribute names + values (strings/numbers approximated by their text)."""
    def size(av: Any) -> int:
        (tag, v), = av.items()
        if tag in ("S", "N"):
            return len(str(v).encode())
        if tag == "B":
            return len(v)
        if tag == "M":
            return 3 + sum(len(k.encode()) + size(x) for k, x in v.items())
        if tag == "L":
            return 3 + sum(size(x) for x in v)
        return 1
    return sum(len(k.encode()) + size(v) for k, v in item.items())


class Meter:
    """Counts DynamoDB requests per operation, Query pages, items and estimated RCUs."""

    def __init__(self, client: Any):
        self.requests: dict[str, int] = defaultdict(int)
        self.items_read = 0
        self.rcu = 0.0
        client.meta.events.register("after-call.dynamodb", self._after)

    def _after(self, model: Any, parsed: dict[str, Any], **_: Any) -> None:
        self.requests[model.name] += 1
        if model.name == "Query":
            items = parsed.get("Items", [])
            self.items_read += len(items)
            self.rcu += max(1, math.ceil(sum(_item_bytes(i) for i in items) / 4096))
        elif model.name == "GetItem":
            self.rcu += max(1, math.ceil(_item_bytes(parsed.get("Item") or {}) / 4096))


def window_read(far_rows: int, window_rows: int = 20) -> dict[str, Any]:
    from datetime import UTC, datetime

    from freezegun import freeze_time
    from freezegun.api import real_monotonic
    from moto import mock_aws
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    from punctual.core import observability as obs
    from punctual.core.usecases.poll import poll
    from tests.support import FreezegunClock, make_stack

    obs.set_stream(open(os.devnull, "w"))  # noqa: SIM115
    try:
        with freeze_time(datetime.fromtimestamp(T0 / 1000, tz=UTC)) as frozen, mock_aws():
            stack = make_stack(clock=FreezegunClock(frozen))
            s = stack.settings
            t = real_monotonic()
            rows = [(T0 + 30 * DAY + i, f"far-{i}") for i in range(far_rows)]
            rows += [(T0 + 60_000 + i * 1000, f"win-{i}") for i in range(window_rows)]
            # straight into moto's table (the HTTP-shaped path costs ~1 ms a row and is not under test)
            backend = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
            for due, i in rows:
                backend.put_item(s.table_name, {"pk": {"S": s.partition_key_value}, "sk": {"S": encode_sk(due, i)},
                                                "payload": {"M": {"n": {"S": i}, "pad": {"S": "x" * 100}}}})
            insert_s = real_monotonic() - t
            meter = Meter(stack.ddb)
            t = real_monotonic()
            report = poll(stack.deps)
            poll_s = real_monotonic() - t
            return {"far_rows": far_rows, "window_rows": window_rows, "sent": report.sent,
                    "requests": dict(meter.requests), "query_items_read": meter.items_read,
                    "rcu_estimate": meter.rcu, "poll_wall_s": round(poll_s, 2), "insert_wall_s": round(insert_s, 1),
                    "next_poll": report.summary()["next_poll"]}
    finally:
        obs.set_stream(None)


def _check_window(m: dict[str, Any]) -> None:
    print("\nwindow read:", json.dumps(m))
    assert m["sent"] == m["window_rows"]
    # the window, plus at most one page of the beyond-window look-ahead (50 rows)
    assert m["query_items_read"] <= m["window_rows"] + 50, m
    assert m["requests"]["Query"] <= 4, m
    assert m["rcu_estimate"] <= 10, m
    assert "Scan" not in m["requests"]


def test_window_read_20k():
    _check_window(window_read(20_000))


@pytest.mark.long
def test_window_read_200k():
    _check_window(window_read(200_000))


# ---------------------------------------------------------------- burst through the handlers in process
def burst_in_process(n: int, backend: str = "fake") -> dict[str, Any]:
    """n rows due within the same 10 s, through the real handlers in process (virtual time, the
    in-memory AWS by default): correctness at volume, and the handlers' own CPU throughput."""
    from dataclasses import replace

    from punctual.core.config import Settings
    from tests.reliability.crashes import START, run_items

    base = START + 60_000
    rows, expected = [], {}
    for i in range(n):
        due = base + (i * 10_000) // n
        sk = encode_sk(due, f"burst-{i}")
        expected[sk] = due
        rows.append({"pk": {"S": "scheduler"}, "sk": {"S": sk}, "payload": {"M": {"i": {"N": str(i)}}}})
    run = run_items(rows, expected, backend=backend, settings=replace(Settings(), send_workers=1),
                    horizon_ms=base + 3_600_000)
    out = run.outcome
    wall = run.wall_s or {}
    late = sorted(d.sent_ms - d.event["due_ms"] for v in out.by_key.values() for d in v[:1])
    return {"rows": n, "delivered": len(out.by_key), "lost": len(out.lost), "early": len(out.early),
            "duplicates": out.duplicates, "invocations": run.invocations,
            "handler_wall_s": {k: round(v, 1) for k, v in wall.items()},
            "send_rate_rows_per_s": round(n / max(0.001, wall.get("editor", 0) + wall.get("poller", 0))),
            "deliver_rate_rows_per_s": round(n / max(0.001, wall.get("consumer", 0))),
            "virtual_lateness_ms_p50_max": [late[len(late) // 2], late[-1]] if late else None}


@pytest.mark.long
def test_burst_in_process():
    m = burst_in_process(int(os.environ.get("PUNCTUAL_LOAD_ROWS", "20000")))
    print("\nburst in process:", json.dumps(m))
    assert m["lost"] == 0 and m["early"] == 0 and m["delivered"] == m["rows"]


# ---------------------------------------------------------------- burst through the local stack
@pytest.mark.long
def test_burst_local_stack(tmp_path):
    from tests.local.test_e2e import start, stop

    n = int(os.environ.get("PUNCTUAL_LOAD_ROWS", "20000"))
    running = start(tmp_path)
    try:
        ddb, sqs = running.client("dynamodb"), running.client("sqs")
        info = running.info
        table = info["table"]
        delivery = info["queues"]["delivery"]
        pk = info["partition"]
        # due within the same 10 s, starting once the rows are written (rate measured first on 500 rows)
        t_ins = time.time()
        lead_s = max(30.0, n / 150)
        base = int((time.time() + lead_s) * 1000)
        dues = {}
        for start_i in range(0, n, 25):
            batch = []
            for i in range(start_i, min(n, start_i + 25)):
                due = base + (i * 10_000) // n
                sk = encode_sk(due, f"load-{i}")
                dues[sk] = due
                batch.append({"PutRequest": {"Item": {"pk": {"S": pk}, "sk": {"S": sk},
                                                      "payload": {"M": {"i": {"N": str(i)}}}}}})
            resp = ddb.batch_write_item(RequestItems={table: batch})
            while resp.get("UnprocessedItems"):
                resp = ddb.batch_write_item(RequestItems=resp["UnprocessedItems"])
        insert_s = time.time() - t_ins
        got: dict[str, dict[str, Any]] = {}
        early: list[str] = []
        duplicates: list[str] = []
        deadline = time.time() + lead_s + 1200
        while len(got) < n and time.time() < deadline:
            resp = sqs.receive_message(QueueUrl=delivery, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                       AttributeNames=["SentTimestamp"])
            msgs = resp.get("Messages", [])
            for msg in msgs:
                ev = json.loads(msg["Body"])
                sent = int(msg["Attributes"]["SentTimestamp"])
                if sent < ev["due_ms"] or ev["delivered_at_ms"] < ev["due_ms"]:
                    early.append(ev["key"])
                if ev["key"] in got:
                    duplicates.append(ev["key"])
                got.setdefault(ev["key"], {"sent": sent, **ev})
            if msgs:
                sqs.delete_message_batch(QueueUrl=delivery, Entries=[
                    {"Id": str(i), "ReceiptHandle": x["ReceiptHandle"]} for i, x in enumerate(msgs)])
        late = sorted(max(0, e["sent"] - e["due_ms"]) for e in got.values())
        first, last = min((e["sent"] for e in got.values()), default=0), max((e["sent"] for e in got.values()),
                                                                              default=0)
        figures = {
            "rows": n, "insert_s": round(insert_s, 1), "insert_rate_per_s": round(n / insert_s),
            "delivered": len(got), "early": len(early), "duplicates": len(duplicates),
            "deliver_rate_per_s": round(len(got) / max(0.001, (last - first) / 1000)),
            "lateness_ms_p50": late[len(late) // 2] if late else None,
            "lateness_ms_p99": late[int(len(late) * 0.99)] if late else None,
            "lateness_ms_max": late[-1] if late else None,
        }
        wall = time.time() - t_ins
        figures["wall_s"] = round(wall)
        print("\nburst:", json.dumps(figures))
        assert early == []
        assert len(got) == n, figures
    finally:
        stop(running)
