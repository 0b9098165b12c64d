"""``punctual bench --backend fake``: the in-memory AWS of :mod:`punctual.bench.fakeaws`
sized for 100,000-task runs, behind clients that look like boto3's to the handlers.

No botocore request/response serialisation and no moto: the handlers' code runs unchanged,
but each AWS call costs microseconds instead of ~5 ms. Differences from the fake used by
the reliability tests: queries use a sorted index per partition (the three key conditions
Punctual issues; anything else falls back to the generic evaluator) and are not paged
small; stream records carry a sequence number that stays increasing after the simulator
consumes them; SQS receives see the simulator's "view" time (see PunctualSim.sqs_view_ms).
"""

from __future__ import annotations

import bisect
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from botocore.exceptions import ClientError

from .capacity import (
    TRANSACT_WRITE_UNITS_PER_ITEM,
    Kind,
    PartitionCapacity,
    get_read_units,
    query_read_units,
    throttled_error,
)
from .fakeaws import FakeAws

_Q_BELOW = re.compile(r"^pk = :p AND sk < :u$")
_Q_FROM = re.compile(r"^pk = :p AND sk >= :l$")
_Q_BETWEEN = re.compile(r"^pk = :p AND sk BETWEEN :l AND :u$")


@dataclass
class BenchAws(FakeAws):
    # DynamoDB's per-partition limits (punctual.bench.capacity); None: unlimited, as before.
    capacity: PartitionCapacity | None = None

    def __post_init__(self) -> None:
        self.sorted_sks: dict[str, list[str]] = {}
        self.seq = 0

    def _record(self, key: tuple[str, str], old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if old is None and new is None:
            return
        self.seq += 1
        name = "INSERT" if old is None else "REMOVE" if new is None else "MODIFY"
        data: dict[str, Any] = {"Keys": {"pk": {"S": key[0]}, "sk": {"S": key[1]}},
                                "SequenceNumber": str(self.seq),
                                "ApproximateCreationDateTime": self.clock.now_ms() // 1000,
                                "StreamViewType": "NEW_AND_OLD_IMAGES"}
        if new is not None:
            data["NewImage"] = copy.deepcopy(new)
        if old is not None:
            data["OldImage"] = copy.deepcopy(old)
        self.stream.append({"eventID": str(self.seq), "eventName": name, "eventVersion": "1.1",
                            "awsRegion": "us-east-1", "dynamodb": data})

    def _store(self, key: tuple[str, str], new: dict[str, Any] | None) -> None:
        existed = key in self.items
        super()._store(key, new)
        sks = self.sorted_sks.setdefault(key[0], [])
        if new is None and existed:
            i = bisect.bisect_left(sks, key[1])
            if i < len(sks) and sks[i] == key[1]:
                sks.pop(i)
        elif new is not None and not existed:
            bisect.insort(sks, key[1])

    # -- DynamoDB's partition limits: each table call Punctual makes is admitted or throttled ---
    @property
    def table_arn(self) -> str:
        return f"arn:aws:dynamodb:us-east-1:123456789012:table/{self.table_name}"

    def _admit(self, op: str, pk: str, kind: Kind, units: float) -> None:
        if self.capacity is not None and not self.capacity.admit(pk, kind, units, self.clock.now_ms()):
            raise throttled_error(op, kind, self.table_arn)

    def op_put_item(self, TableName, Item, **kw):
        self._admit("PutItem", Item["pk"]["S"], "write", 1)
        return super().op_put_item(TableName, Item, **kw)

    def op_update_item(self, TableName, Key, UpdateExpression, **kw):
        self._admit("UpdateItem", Key["pk"]["S"], "write", 1)
        return super().op_update_item(TableName, Key, UpdateExpression, **kw)

    def op_delete_item(self, TableName, Key, **kw):
        self._admit("DeleteItem", Key["pk"]["S"], "write", 1)
        return super().op_delete_item(TableName, Key, **kw)

    def op_get_item(self, TableName, Key, ConsistentRead=False, **kw):
        self._admit("GetItem", Key["pk"]["S"], "read", get_read_units(ConsistentRead))
        return super().op_get_item(TableName, Key, ConsistentRead, **kw)

    def op_batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]], **kw: Any) -> dict[str, Any]:
        """Items over their partition's limit come back in UnprocessedItems; when none is
        admitted the whole call is throttled (BatchWriteItem API reference)."""
        if self.capacity is None:
            return super().op_batch_write_item(RequestItems, **kw)
        now = self.clock.now_ms()
        admitted: dict[str, list[dict[str, Any]]] = {}
        unprocessed: dict[str, list[dict[str, Any]]] = {}
        for table, reqs in RequestItems.items():
            for r in reqs:
                key = r["PutRequest"]["Item"] if "PutRequest" in r else r["DeleteRequest"]["Key"]
                ok = self.capacity.admit(key["pk"]["S"], "write", 1, now)
                (admitted if ok else unprocessed).setdefault(table, []).append(r)
        if not admitted:
            raise throttled_error("BatchWriteItem", "write", self.table_arn)
        super().op_batch_write_item(admitted, **kw)
        return {"UnprocessedItems": unprocessed}

    def op_transact_write_items(self, TransactItems, **kw):
        """Admitted as a whole: every partition it writes must have its items' units (two a item)."""
        if self.capacity is not None:
            units: dict[str, float] = {}
            for t in TransactItems:
                for kind, spec in t.items():
                    pk = (spec["Item"] if kind == "Put" else spec["Key"])["pk"]["S"]
                    units[pk] = units.get(pk, 0) + TRANSACT_WRITE_UNITS_PER_ITEM
            for pk, n in units.items():
                self._admit("TransactWriteItems", pk, "write", n)
        return super().op_transact_write_items(TransactItems, **kw)

    def op_query(self, TableName, KeyConditionExpression, ExpressionAttributeValues, ExpressionAttributeNames=None,
                 ExclusiveStartKey=None, Limit=None, ConsistentRead=False, ScanIndexForward=True, **kw):
        resp = self._query_page(TableName, KeyConditionExpression, ExpressionAttributeValues,
                                ExpressionAttributeNames, ExclusiveStartKey, Limit, ConsistentRead,
                                ScanIndexForward, **kw)
        if self.capacity is not None:
            self._admit("Query", ExpressionAttributeValues.get(":p", {}).get("S", ""), "read",
                        query_read_units(resp.get("Items", []), ConsistentRead))
        return resp

    def _query_page(self, TableName, KeyConditionExpression, ExpressionAttributeValues, ExpressionAttributeNames,
                    ExclusiveStartKey, Limit, ConsistentRead, ScanIndexForward, **kw):
        cond, vals = KeyConditionExpression.strip(), ExpressionAttributeValues
        if ExpressionAttributeNames or not ScanIndexForward or ":p" not in vals:
            return super().op_query(TableName, KeyConditionExpression, ExpressionAttributeValues,
                                    ExpressionAttributeNames, ExclusiveStartKey, Limit, ConsistentRead,
                                    ScanIndexForward, **kw)
        sks = self.sorted_sks.get(vals[":p"]["S"], [])
        if _Q_BELOW.match(cond):
            lo, hi = 0, bisect.bisect_left(sks, vals[":u"]["S"])
        elif _Q_FROM.match(cond):
            lo, hi = bisect.bisect_left(sks, vals[":l"]["S"]), len(sks)
        elif _Q_BETWEEN.match(cond):
            lo, hi = bisect.bisect_left(sks, vals[":l"]["S"]), bisect.bisect_right(sks, vals[":u"]["S"])
        else:
            return super().op_query(TableName, KeyConditionExpression, ExpressionAttributeValues,
                                    ExpressionAttributeNames, ExclusiveStartKey, Limit, ConsistentRead,
                                    ScanIndexForward, **kw)
        if ExclusiveStartKey:
            lo = max(lo, bisect.bisect_right(sks, ExclusiveStartKey["sk"]["S"]))
        page = Limit or self.query_page
        pk = vals[":p"]["S"]
        chosen = sks[lo:min(hi, lo + page)]
        out = [copy.deepcopy(self.items[(pk, sk)]) for sk in chosen]
        resp: dict[str, Any] = {"Items": out, "Count": len(out), "ScannedCount": len(out)}
        if lo + page < hi:
            resp["LastEvaluatedKey"] = {"pk": {"S": pk}, "sk": {"S": chosen[-1]}}
        return resp

    def op_purge_queue(self, QueueUrl, **_):
        self.queues[QueueUrl] = []
        return {}


class BenchClient:
    """A boto3-client look-alike over :class:`BenchAws` that emits the botocore events the
    simulator hooks (provide-client-params, before-call, after-call) with the same arguments."""

    def __init__(self, aws: BenchAws, service: str):
        self._aws, self._service = aws, service
        self._handlers: dict[str, list[Callable[..., Any]]] = {}
        self.meta = SimpleNamespace(service_model=SimpleNamespace(service_name=service),
                                    events=SimpleNamespace(register=self._register))

    def _register(self, event: str, handler: Callable[..., Any]) -> None:
        self._handlers.setdefault(event.split(".")[0], []).append(handler)

    def _emit(self, event: str, **kw: Any) -> None:
        for h in self._handlers.get(event, ()):
            h(**kw)

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op.startswith("_"):
            raise AttributeError(op)
        impl = getattr(self._aws, "op_" + op)
        model = SimpleNamespace(name="".join(w.capitalize() for w in op.split("_")))

        def call(**kw: Any) -> Any:
            context: dict[str, Any] = {}
            self._emit("provide-client-params", params=kw, context=context)
            self._emit("before-call", model=model, params=kw, context=context)
            try:
                parsed = impl(**copy.deepcopy(kw))
            except ClientError as e:
                self._emit("after-call", http_response=SimpleNamespace(status_code=400), parsed=e.response,
                           model=model, context=context)
                raise
            self._emit("after-call", http_response=SimpleNamespace(status_code=200), parsed=parsed,
                       model=model, context=context)
            return parsed

        return call
