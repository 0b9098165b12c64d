"""The in-memory DynamoDB / SQS / EventBridge behind ``punctual bench --backend fake``.

:class:`FakeAws` is the engine of the benchmark's fake backend (:class:`punctual.bench.fastaws.BenchAws`
extends it: a sorted index per partition, stream records as the simulator reads them); the
reliability tests put boto3-like clients in front of it (tests/reliability/fakeaws.py).

Only what Punctual's code calls, with the semantics that matter for its invariants:
conditional writes (a small expression evaluator for the condition / update expressions used),
strongly consistent reads, paginated queries, SQS DelaySeconds / visibility timeouts / receive
counts, a table stream (NEW_AND_OLD_IMAGES records), and a rule whose every PutRule is recorded
with the virtual time it was made at. Callers invoke ``op_<operation>(**params)`` directly.
"""

from __future__ import annotations

import copy
import functools
import re
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from punctual.core.cron import parse_one_shot_cron


def _err(code: str, op: str, msg: str = "") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": msg or code}}, op)


# ---------------------------------------------------------------- expressions
_TOKEN = re.compile(r"\s*(<>|<=|>=|[=<>(),+\-]|[#:]?[A-Za-z_][A-Za-z0-9_]*)")


@functools.lru_cache(maxsize=256)
def _tokens(expr: str) -> tuple[str, ...]:
    out, pos = [], 0
    expr = expr.strip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise NotImplementedError(f"fake DynamoDB cannot parse {expr[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
    return tuple(out)


class _Expr:
    def __init__(self, text: str, names: dict[str, str] | None, values: dict[str, Any] | None):
        self.toks = _tokens(text)
        self.i = 0
        self.names = names or {}
        self.values = values or {}

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expect: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expect is not None and tok.upper() != expect):
            raise NotImplementedError(f"expected {expect} at {self.toks[self.i:]}")
        self.i += 1
        return tok

    def name(self, tok: str) -> str:
        return self.names[tok] if tok.startswith("#") else tok

    # operands: (kind, x) where kind is "path" or "value"
    def operand(self) -> tuple[str, Any]:
        tok = self.take()
        if tok.startswith(":"):
            return ("value", self.values[tok])
        if tok.lower() == "if_not_exists":
            self.take("(")
            path = self.name(self.take())
            self.take(",")
            alt = self.operand()
            self.take(")")
            return ("ine", (path, alt))
        return ("path", self.name(tok))


def _resolve(item: dict[str, Any], op: tuple[str, Any]) -> Any:
    kind, x = op
    if kind == "value":
        return x
    if kind == "path":
        return item.get(x)
    path, alt = x
    return item[path] if path in item else _resolve(item, alt)


def _cmp_key(av: Any) -> tuple[str, Any] | None:
    if not isinstance(av, dict):
        return None
    if "N" in av:
        return ("N", Decimal(av["N"]))
    if "S" in av:
        return ("S", av["S"])
    if "B" in av:
        return ("B", av["B"])
    return None


def _compare(a: Any, op: str, b: Any) -> bool:
    ka, kb = _cmp_key(a), _cmp_key(b)
    if op == "=":
        return a is not None and a == b if ka is None else ka == kb
    if op == "<>":
        return not _compare(a, "=", b)
    if ka is None or kb is None or ka[0] != kb[0]:
        return False
    x, y = ka[1], kb[1]
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


class _Cond(_Expr):
    def evaluate(self, item: dict[str, Any]) -> bool:
        result = self.or_(item)
        if self.peek() is not None:
            raise NotImplementedError(f"trailing tokens {self.toks[self.i:]}")
        return result

    def or_(self, item: dict[str, Any]) -> bool:
        value = self.and_(item)
        while (self.peek() or "").upper() == "OR":
            self.take()
            rhs = self.and_(item)
            value = value or rhs
        return value

    def and_(self, item: dict[str, Any]) -> bool:
        value = self.not_(item)
        while (self.peek() or "").upper() == "AND":
            self.take()
            rhs = self.not_(item)
            value = value and rhs
        return value

    def not_(self, item: dict[str, Any]) -> bool:
        if (self.peek() or "").upper() == "NOT":
            self.take()
            return not self.not_(item)
        return self.atom(item)

    def atom(self, item: dict[str, Any]) -> bool:
        tok = self.peek() or ""
        if tok == "(":
            self.take()
            value = self.or_(item)
            self.take(")")
            return value
        low = tok.lower()
        if low in ("attribute_exists", "attribute_not_exists", "begins_with"):
            self.take()
            self.take("(")
            path = self.name(self.take())
            if low == "begins_with":
                self.take(",")
                prefix = _resolve(item, self.operand())
                self.take(")")
                v = item.get(path)
                return isinstance(v, dict) and "S" in v and v["S"].startswith(prefix["S"])
            self.take(")")
            return (path in item) == (low == "attribute_exists")
        lhs = _resolve(item, self.operand())
        op = self.take()
        if op.upper() == "BETWEEN":
            lo = _resolve(item, self.operand())
            self.take("AND")
            hi = _resolve(item, self.operand())
            return _compare(lhs, ">=", lo) and _compare(lhs, "<=", hi)
        rhs = _resolve(item, self.operand())
        return _compare(lhs, op, rhs)


def _num(av: Any) -> Decimal:
    return Decimal(av["N"])


def _fmt(d: Decimal) -> str:
    return str(int(d)) if d == d.to_integral_value() else str(d)


class _Update(_Expr):
    def apply(self, item: dict[str, Any]) -> dict[str, Any]:
        old = dict(item)
        new = dict(item)
        while self.peek() is not None:
            clause = self.take().upper()
            if clause == "SET":
                while True:
                    path = self.name(self.take())
                    self.take("=")
                    value = _resolve(old, self.operand())
                    if self.peek() in ("+", "-"):
                        sign = self.take()
                        rhs = _resolve(old, self.operand())
                        value = {"N": _fmt(_num(value) + _num(rhs) if sign == "+" else _num(value) - _num(rhs))}
                    new[path] = value
                    if self.peek() != ",":
                        break
                    self.take()
            elif clause == "REMOVE":
                while True:
                    new.pop(self.name(self.take()), None)
                    if self.peek() != ",":
                        break
                    self.take()
            elif clause == "ADD":
                while True:
                    path = self.name(self.take())
                    value = _resolve(old, self.operand())
                    if "N" in value:
                        base = _num(old[path]) if path in old else Decimal(0)
                        new[path] = {"N": _fmt(base + _num(value))}
                    elif "SS" in value:
                        new[path] = {"SS": sorted(set(old.get(path, {}).get("SS", ())) | set(value["SS"]))}
                    else:
                        raise NotImplementedError("ADD to number or binary sets")
                    if self.peek() != ",":
                        break
                    self.take()
            elif clause == "DELETE":  # elements from a string set; an empty set is no attribute
                while True:
                    path = self.name(self.take())
                    value = _resolve(old, self.operand())
                    left = sorted(set(old.get(path, {}).get("SS", ())) - set(value.get("SS", ())))
                    if left:
                        new[path] = {"SS": left}
                    else:
                        new.pop(path, None)
                    if self.peek() != ",":
                        break
                    self.take()
            else:
                raise NotImplementedError(f"update clause {clause}")
        return new


# ---------------------------------------------------------------- the fake
@dataclass
class Message:
    id: str
    body: str
    visible_at: int
    sent_at: int
    receipt: str = ""
    receives: int = 0
    delay_seconds: int = 0
    first_received_at: int | None = None  # ApproximateFirstReceiveTimestamp


@dataclass
class RuleCall:
    at_ms: int  # when it took effect
    state: str
    armed_ms: int | None  # minute of the cron expression, None when disabled
    issued_ms: int = 0  # when the caller made the call


@dataclass
class Published:
    """A message published to an SNS topic (direct delivery's control topic), not yet taken."""
    topic_arn: str
    message: str
    message_id: str
    at_ms: int


@dataclass
class FakeAws:
    clock: Any
    table_name: str = "punctual"
    query_page: int = 7  # rows per query page: small by default, so callers' pagination is exercised
    items: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, list[Message]] = field(default_factory=dict)
    rule_calls: list[RuleCall] = field(default_factory=list)
    rule_state: str = "DISABLED"
    rule_armed_ms: int | None = None
    issued_ms: int = 0  # when the current call was issued, for a client that lets time pass before it acts
    visibility_timeout_s: int = 30
    stream: list[dict[str, Any]] = field(default_factory=list)
    published: list[Published] = field(default_factory=list)  # SNS: taken by whoever delivers them

    def _record(self, key: tuple[str, str], old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if old is None and new is None:
            return
        name = "INSERT" if old is None else "REMOVE" if new is None else "MODIFY"
        data: dict[str, Any] = {"Keys": {"pk": {"S": key[0]}, "sk": {"S": key[1]}},
                                "SequenceNumber": str(len(self.stream) + 1),
                                "ApproximateCreationDateTime": self.clock.now_ms() / 1000,
                                "StreamViewType": "NEW_AND_OLD_IMAGES"}
        if new is not None:
            data["NewImage"] = copy.deepcopy(new)
        if old is not None:
            data["OldImage"] = copy.deepcopy(old)
        self.stream.append({"eventID": str(len(self.stream) + 1), "eventName": name, "eventSource": "aws:dynamodb",
                            "awsRegion": "us-east-1", "dynamodb": data,
                            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/punctual/stream/x"})

    def _store(self, key: tuple[str, str], new: dict[str, Any] | None) -> None:
        old = self.items.get(key)
        if new is None:
            self.items.pop(key, None)
        else:
            self.items[key] = copy.deepcopy(new)
        self._record(key, old, new)

    # dynamodb ------------------------------------------------------------
    @staticmethod
    def _k(key: dict[str, Any]) -> tuple[str, str]:
        return key["pk"]["S"], key["sk"]["S"]

    def op_put_item(self, TableName, Item, ConditionExpression=None, ExpressionAttributeNames=None,
                    ExpressionAttributeValues=None, **_):
        k = self._k(Item)
        cur = self.items.get(k, {})
        if ConditionExpression and not _Cond(ConditionExpression, ExpressionAttributeNames,
                                             ExpressionAttributeValues).evaluate(cur):
            raise _err("ConditionalCheckFailedException", "PutItem")
        self._store(k, Item)
        return {}

    def op_get_item(self, TableName, Key, ConsistentRead=False, **_):
        item = self.items.get(self._k(Key))
        return {"Item": copy.deepcopy(item)} if item is not None else {}

    def op_delete_item(self, TableName, Key, ConditionExpression=None, ExpressionAttributeNames=None,
                       ExpressionAttributeValues=None, ReturnValues=None, **_):
        k = self._k(Key)
        cur = self.items.get(k, {})
        if ConditionExpression and not _Cond(ConditionExpression, ExpressionAttributeNames,
                                             ExpressionAttributeValues).evaluate(cur):
            raise _err("ConditionalCheckFailedException", "DeleteItem")
        old = self.items.get(k)
        self._store(k, None)
        return {"Attributes": old} if ReturnValues == "ALL_OLD" and old else {}

    def op_update_item(self, TableName, Key, UpdateExpression, ConditionExpression=None,
                       ExpressionAttributeNames=None, ExpressionAttributeValues=None, ReturnValues=None, **_):
        k = self._k(Key)
        cur = self.items.get(k, {})
        if ConditionExpression and not _Cond(ConditionExpression, ExpressionAttributeNames,
                                             ExpressionAttributeValues).evaluate(cur):
            raise _err("ConditionalCheckFailedException", "UpdateItem")
        new = _Update(UpdateExpression, ExpressionAttributeNames, ExpressionAttributeValues).apply(cur)
        new.update(Key)
        self._store(k, new)
        if ReturnValues == "ALL_NEW":
            return {"Attributes": copy.deepcopy(new)}
        if ReturnValues == "UPDATED_NEW":  # the attributes the update set (what changed)
            return {"Attributes": {k: copy.deepcopy(v) for k, v in new.items() if cur.get(k) != v}}
        return {}

    def op_query(self, TableName, KeyConditionExpression, ExpressionAttributeValues, ExpressionAttributeNames=None,
                 ExclusiveStartKey=None, Limit=None, ConsistentRead=False, ScanIndexForward=True, **_):
        cond = KeyConditionExpression
        want = ExpressionAttributeValues.get(":p", {}).get("S")  # Punctual's queries name the pk :p
        rows = [
            item for (pk, sk), item in self.items.items()
            if (want is None or pk == want)
            and _Cond(cond, ExpressionAttributeNames, ExpressionAttributeValues).evaluate(item)
        ]
        rows.sort(key=lambda it: it["sk"]["S"], reverse=not ScanIndexForward)
        if ExclusiveStartKey:
            start = ExclusiveStartKey["sk"]["S"]
            rows = [r for r in rows if (r["sk"]["S"] > start if ScanIndexForward else r["sk"]["S"] < start)]
        page = min(Limit or self.query_page, self.query_page)
        out = rows[:page]
        resp: dict[str, Any] = {"Items": copy.deepcopy(out), "Count": len(out)}
        if len(rows) > page:
            resp["LastEvaluatedKey"] = {"pk": out[-1]["pk"], "sk": out[-1]["sk"]}
        return resp

    def op_transact_write_items(self, TransactItems, **_):
        if len(TransactItems) > 100:
            raise _err("ValidationException", "TransactWriteItems", "at most 100 items")
        keys = [self._k(spec["Item"] if kind == "Put" else spec["Key"]) for t in TransactItems
                for kind, spec in t.items()]
        if len(set(keys)) != len(keys):
            raise _err("ValidationException", "TransactWriteItems",
                       "Transaction request cannot include multiple operations on one item")
        # all-or-nothing: check every condition first; a cancellation names each item's reason, in
        # order ("None" for the items that passed), as DynamoDB does
        codes = []
        for t, key in zip(TransactItems, keys, strict=True):
            (_kind, spec), = t.items()
            cond = spec.get("ConditionExpression")
            ok = not cond or _Cond(cond, spec.get("ExpressionAttributeNames"),
                                   spec.get("ExpressionAttributeValues")).evaluate(self.items.get(key, {}))
            codes.append("None" if ok else "ConditionalCheckFailed")
        if any(code != "None" for code in codes):
            raise ClientError({"Error": {"Code": "TransactionCanceledException",
                                         "Message": f"Transaction cancelled [{', '.join(codes)}]"},
                               "CancellationReasons": [{"Code": code} for code in codes]}, "TransactWriteItems")
        for t in TransactItems:
            (kind, spec), = t.items()
            spec = {k: v for k, v in spec.items() if k not in ("ConditionExpression",)}
            if kind == "Put":
                self._store(self._k(spec["Item"]), spec["Item"])
            elif kind == "Delete":
                self._store(self._k(spec["Key"]), None)
            elif kind == "Update":
                cur = self.items.get(self._k(spec["Key"]), {})
                new = _Update(spec["UpdateExpression"], spec.get("ExpressionAttributeNames"),
                              spec.get("ExpressionAttributeValues")).apply(cur)
                new.update(spec["Key"])
                self._store(self._k(spec["Key"]), new)
            elif kind != "ConditionCheck":
                raise NotImplementedError(kind)
        return {}

    def op_batch_get_item(self, RequestItems, **_):
        out: dict[str, list[dict[str, Any]]] = {}
        for table, spec in RequestItems.items():
            if len(spec["Keys"]) > 100:
                raise _err("ValidationException", "BatchGetItem", "too many keys")
            out[table] = [copy.deepcopy(self.items[self._k(k)]) for k in spec["Keys"] if self._k(k) in self.items]
        return {"Responses": out, "UnprocessedKeys": {}}

    def op_batch_write_item(self, RequestItems, **_):
        for _table, reqs in RequestItems.items():
            for r in reqs:
                if "PutRequest" in r:
                    item = r["PutRequest"]["Item"]
                    self._store(self._k(item), item)
                else:
                    self._store(self._k(r["DeleteRequest"]["Key"]), None)
        return {"UnprocessedItems": {}}

    # sns -----------------------------------------------------------------
    def op_publish(self, TopicArn, Message, **_):
        if len(Message.encode("utf-8")) > 262_144:
            raise _err("InvalidParameter", "Publish", "message too long")
        mid = str(uuid.uuid4())
        self.published.append(Published(TopicArn, Message, mid, self.clock.now_ms()))
        return {"MessageId": mid}

    def take_published(self) -> list[Published]:
        """The messages published since the last call (SNS hands each to the subscriptions once)."""
        out, self.published = self.published, []
        return out

    # sqs -----------------------------------------------------------------
    def queue(self, url: str) -> list[Message]:
        return self.queues.setdefault(url, [])

    def _enqueue(self, url: str, body: str, delay: int) -> str:
        if not isinstance(delay, int) or not 0 <= delay <= 900:
            raise _err("InvalidParameterValue", "SendMessage", f"DelaySeconds {delay!r}")
        if len(body.encode("utf-8")) > 262_144:
            raise _err("InvalidParameterValue", "SendMessage", "message too long")
        now = self.clock.now_ms()
        mid = str(uuid.uuid4())
        self.queue(url).append(Message(mid, body, now + delay * 1000, now, delay_seconds=delay))
        return mid

    def op_send_message(self, QueueUrl, MessageBody, DelaySeconds=0, **_):
        return {"MessageId": self._enqueue(QueueUrl, MessageBody, DelaySeconds)}

    def op_send_message_batch(self, QueueUrl, Entries, **_):
        if not 1 <= len(Entries) <= 10:
            raise _err("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "SendMessageBatch")
        ok = [{"Id": e["Id"], "MessageId": self._enqueue(QueueUrl, e["MessageBody"], e.get("DelaySeconds", 0))}
              for e in Entries]
        return {"Successful": ok, "Failed": []}

    def visible(self, url: str) -> list[Message]:
        now = self.clock.now_ms()
        return [m for m in self.queue(url) if m.visible_at <= now]

    def op_receive_message(self, QueueUrl, MaxNumberOfMessages=1, VisibilityTimeout=None, **_):
        now = self.clock.now_ms()
        out = []
        for m in self.visible(QueueUrl)[:MaxNumberOfMessages]:
            m.receives += 1
            m.first_received_at = now if m.first_received_at is None else m.first_received_at
            m.receipt = str(uuid.uuid4())
            m.visible_at = now + 1000 * (VisibilityTimeout if VisibilityTimeout is not None
                                         else self.visibility_timeout_s)
            out.append({"MessageId": m.id, "ReceiptHandle": m.receipt, "Body": m.body,
                        "Attributes": {"ApproximateReceiveCount": str(m.receives),
                                       "SentTimestamp": str(m.sent_at),
                                       "ApproximateFirstReceiveTimestamp": str(m.first_received_at)}})
        return {"Messages": out} if out else {}

    def _by_receipt(self, url: str, receipt: str) -> Message | None:
        return next((m for m in self.queue(url) if m.receipt == receipt), None)

    def op_delete_message(self, QueueUrl, ReceiptHandle, **_):
        m = self._by_receipt(QueueUrl, ReceiptHandle)
        if m:
            self.queue(QueueUrl).remove(m)
        return {}

    def op_delete_message_batch(self, QueueUrl, Entries, **_):
        for e in Entries:
            self.op_delete_message(QueueUrl, e["ReceiptHandle"])
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def op_change_message_visibility(self, QueueUrl, ReceiptHandle, VisibilityTimeout, **_):
        if not 0 <= VisibilityTimeout <= 43_200:
            raise _err("InvalidParameterValue", "ChangeMessageVisibility")
        m = self._by_receipt(QueueUrl, ReceiptHandle)
        if m is None:
            raise _err("ReceiptHandleIsInvalid", "ChangeMessageVisibility")
        m.visible_at = self.clock.now_ms() + VisibilityTimeout * 1000
        return {}

    def op_get_queue_attributes(self, QueueUrl, **_):
        vis = len(self.visible(QueueUrl))
        now = self.clock.now_ms()
        hidden = [m for m in self.queue(QueueUrl) if m.visible_at > now]
        delayed = sum(1 for m in hidden if m.receives == 0)  # never received: waiting out DelaySeconds
        return {"Attributes": {"ApproximateNumberOfMessages": str(vis),
                               "ApproximateNumberOfMessagesNotVisible": str(len(hidden) - delayed),
                               "ApproximateNumberOfMessagesDelayed": str(delayed)}}

    # events --------------------------------------------------------------
    def op_put_rule(self, Name, ScheduleExpression=None, State="ENABLED", **_):
        armed = parse_one_shot_cron(ScheduleExpression) if ScheduleExpression else self.rule_armed_ms
        self.rule_state, self.rule_armed_ms = State, armed
        self.rule_calls.append(RuleCall(self.clock.now_ms(), State, armed if State == "ENABLED" else None,
                                        self.issued_ms))
        return {"RuleArn": f"arn:aws:events:us-east-1:123456789012:rule/{Name}"}

    def op_disable_rule(self, Name, **_):
        self.rule_state = "DISABLED"
        self.rule_calls.append(RuleCall(self.clock.now_ms(), "DISABLED", None))
        return {}

    def op_enable_rule(self, Name, **_):
        self.rule_state = "ENABLED"
        self.rule_calls.append(RuleCall(self.clock.now_ms(), "ENABLED", self.rule_armed_ms))
        return {}

    def op_describe_rule(self, Name, **_):
        from punctual.core.cron import one_shot_cron

        expr = one_shot_cron(self.rule_armed_ms) if self.rule_armed_ms is not None else "cron(0 0 1 1 ? 2199)"
        return {"Name": Name, "State": self.rule_state, "ScheduleExpression": expr}

    @property
    def armed(self) -> int | None:
        """The minute the rule will fire in, or None when it is disabled."""
        return self.rule_armed_ms if self.rule_state == "ENABLED" else None

