"""DynamoDB access for task rows (low-level client, attribute-value items).

Takes a client; never imports boto3. Every call retries throttling with the one policy of
``retry.py`` (bounded by the invocation's deadline).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from . import observability as obs
from .clock import Clock
from .config import Settings
from .errors import is_conditional_failure
from .metrics_names import REJECTED_ROWS
from .models import ATTR_ATTEMPT, ATTR_CLAIM, ATTR_DELIVERING, ATTR_ENQUEUED_MS, Rejection, RowRejected, Task
from .parallel import pmap
from .retry import call_with_retry, retry_unprocessed

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient


def row_key(pk: str, sk: str) -> dict[str, Any]:
    """The primary key of row (pk, sk), as attribute values."""
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _query(ddb: DynamoDBClient, clock: Clock, **kw: Any) -> Iterator[dict[str, Any]]:
    start: dict[str, Any] | None = None
    while True:
        args = dict(kw)
        if start:
            args["ExclusiveStartKey"] = start
        page = call_with_retry(partial(ddb.query, **args), clock)
        yield from page.get("Items", [])
        start = page.get("LastEvaluatedKey")
        if not start:
            return


def item_sk(item: dict[str, Any]) -> str:
    """The sort key of a row read by a query (a key attribute: always a string)."""
    return str(item["sk"]["S"])


def across_partitions(read: Callable[[str], Iterable[dict[str, Any]]], pks: Sequence[str],
                      workers: int = 0) -> Iterator[dict[str, Any]]:
    """The rows ``read(pk)`` gives for every partition of ``pks`` (``Settings.partitions``), merged
    oldest first (by sk, as each partition is sorted). With ``workers``, each partition is read
    whole, that many at a time; without, lazily (a page of each first, more as the merge needs)."""
    if len(pks) == 1:
        return iter(read(pks[0]))
    parts = pmap(lambda pk: list(read(pk)), pks, workers) if workers else [read(pk) for pk in pks]
    return heapq.merge(*parts, key=item_sk)


def query_below(ddb: DynamoDBClient, s: Settings, clock: Clock, upper_key: str, *, pk: str) -> Iterator[dict[str, Any]]:
    """Every row of partition ``pk`` with ``sk < upper_key``, oldest first, strongly consistent."""
    return _query(
        ddb,
        clock,
        TableName=s.table_name,
        KeyConditionExpression="pk = :p AND sk < :u",
        ExpressionAttributeValues={":p": {"S": pk}, ":u": {"S": upper_key}},
        ConsistentRead=True,
    )


def query_from(
    ddb: DynamoDBClient, s: Settings, clock: Clock, lower_key: str, upper_key: str | None = None, page_size: int = 50,
    *, pk: str,
) -> Iterator[dict[str, Any]]:
    """Rows of partition ``pk`` with ``lower_key <= sk`` (and ``sk <= upper_key``), oldest first, in
    pages of ``page_size`` rows (0: DynamoDB's 1 MB pages)."""
    values = {":p": {"S": pk}, ":l": {"S": lower_key}}
    cond = "pk = :p AND sk >= :l"
    if upper_key is not None:
        cond = "pk = :p AND sk BETWEEN :l AND :u"
        values[":u"] = {"S": upper_key}
    return _query(
        ddb,
        clock,
        TableName=s.table_name,
        KeyConditionExpression=cond,
        ExpressionAttributeValues=values,
        ConsistentRead=True,
        **({"Limit": page_size} if page_size else {}),
    )


def conditional_update(ddb: DynamoDBClient, clock: Clock, **request: Any) -> dict[str, Any] | None:
    """``UpdateItem`` with a condition: the response if applied, None if the condition failed."""
    try:
        return dict(call_with_retry(lambda: ddb.update_item(**request), clock))
    except Exception as exc:
        if is_conditional_failure(exc):
            return None
        raise


def claim(ddb: DynamoDBClient, s: Settings, clock: Clock, task: Task, now_ms: int,
          token: str | None = None) -> int | None:
    """Mark ``task`` as sent at ``now_ms`` (by ``token``) before sending it: the row's attempt
    number for this send (its pointer carries it: the consumer's fence checks it), or None if
    someone else did.

    Conditional on the row still existing (a cancelled row is never resurrected)
    and on its send mark being what we read (so the editor and concurrent polls
    never both send the same row). A claim without a token removes an older one.
    """
    values: dict[str, Any] = {":now": {"N": str(now_ms)}, ":one": {"N": "1"}, ":zero": {"N": "0"}}
    names = {"#e": ATTR_ENQUEUED_MS, "#a": ATTR_ATTEMPT, "#c": ATTR_CLAIM, "#d": ATTR_DELIVERING}
    update = "SET #e = :now, #a = if_not_exists(#a, :zero) + :one"
    if token is not None:
        update += ", #c = :tok"
        values[":tok"] = {"S": token}
    # a new send: the mark of a delivery of an earlier send that never completed goes
    update += " REMOVE #d" if token is not None else " REMOVE #c, #d"
    if task.enqueued_ms is None:
        # unsent as read; or claimed meanwhile by an earlier attempt of the same work (token): a
        # retry that must finish what a crashed attempt may not have sent
        mine = " OR #c = :tok" if token is not None else ""
        cond = f"attribute_exists(sk) AND (attribute_not_exists(#e){mine})"
    else:
        cond = "attribute_exists(sk) AND #e = :prev"
        values[":prev"] = {"N": str(task.enqueued_ms)}
    applied = conditional_update(
        ddb,
        clock,
        TableName=s.table_name,
        Key=row_key(task.pk, task.sk),
        UpdateExpression=update,
        ConditionExpression=cond,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
        ReturnValues="UPDATED_NEW",
    )
    if applied is None:
        return None
    return int(applied["Attributes"][ATTR_ATTEMPT]["N"])


def release(ddb: DynamoDBClient, s: Settings, clock: Clock, task: Task, claimed_ms: int, *,
            counts: bool = False) -> bool:
    """Undo our claim after a send that failed for good, so the row is sent again soon.

    The claim counted a send (``punctual_attempt``); a send SQS refused did not reach the delay
    queue, so it is taken back (invariant 3: attempts count sends that reached it, an outage of
    any length makes no valid row undeliverable). ``counts``: SQS refused the message for its own
    content (SenderFault), so the attempt stays and the row is rejected after ``max_attempts``.
    The row keeps its ``punctual_attempt`` attribute either way: that tells a release from a
    user's write over the row (stream.classify_record)."""
    update = "REMOVE #e" if counts else "REMOVE #e SET #a = #a - :one"
    values: dict[str, Any] = {":mine": {"N": str(claimed_ms)}}
    if not counts:
        values[":one"] = {"N": "1"}
    applied = conditional_update(
        ddb,
        clock,
        TableName=s.table_name,
        Key=row_key(task.pk, task.sk),
        UpdateExpression=update,
        ConditionExpression="#e = :mine",
        ExpressionAttributeNames={"#e": ATTR_ENQUEUED_MS, **({} if counts else {"#a": ATTR_ATTEMPT})},
        ExpressionAttributeValues=values,
    )
    return applied is not None


def fence(ddb: DynamoDBClient, s: Settings, clock: Clock, pk: str, sk: str, attempt: int,
          token: str) -> dict[str, Any] | None:
    """Mark row (pk, sk) as being delivered by the pointer ``token`` of send ``attempt``, and read it
    (strongly: the write returns the row as it is now). None when the row is gone (cancelled,
    rescheduled, delivered), was sent again since (another attempt: a newer pointer delivers it) or
    another pointer is delivering it. Raises when the table fails.

    A cancel checks this mark (client.cancel): one that lands before it wins and the row is never
    delivered; one after it answers AlreadyDelivered (docs/architecture.md, "Cancellation never
    lies")."""
    resp = conditional_update(
        ddb, clock, TableName=s.table_name, Key=row_key(pk, sk), UpdateExpression="SET #d = :tok",
        ConditionExpression="attribute_exists(sk) AND #a = :att AND (attribute_not_exists(#d) OR #d = :tok)",
        ExpressionAttributeNames={"#d": ATTR_DELIVERING, "#a": ATTR_ATTEMPT},
        ExpressionAttributeValues={":tok": {"S": token}, ":att": {"N": str(attempt)}}, ReturnValues="ALL_NEW")
    return None if resp is None else dict(resp.get("Attributes") or {})


def unfence(ddb: DynamoDBClient, s: Settings, clock: Clock, pk: str, sk: str, token: str, now_ms: int) -> bool:
    """Take back the mark of a delivery that did not happen (its send failed), and restart the
    row's orphan clock: a copy of its pointer will retry (the poll must not send it again)."""
    return conditional_update(
        ddb, clock, TableName=s.table_name, Key=row_key(pk, sk), UpdateExpression="REMOVE #d SET #e = :now",
        ConditionExpression="#d = :tok", ExpressionAttributeNames={"#d": ATTR_DELIVERING, "#e": ATTR_ENQUEUED_MS},
        ExpressionAttributeValues={":tok": {"S": token}, ":now": {"N": str(now_ms)}}) is not None


def delete_fenced(ddb: DynamoDBClient, s: Settings, clock: Clock, pk: str, sk: str, token: str) -> bool:
    """Delete a delivered row while it holds our mark; False when it does not (a put over it since:
    a new task, never deleted by a delivery that read the old one). Raises when the table fails."""
    try:
        call_with_retry(lambda: ddb.delete_item(
            TableName=s.table_name, Key=row_key(pk, sk), ConditionExpression="#d = :tok",
            ExpressionAttributeNames={"#d": ATTR_DELIVERING}, ExpressionAttributeValues={":tok": {"S": token}}),
            clock)
    except Exception as exc:
        if is_conditional_failure(exc):
            return False
        raise
    return True


def get_row(ddb: DynamoDBClient, s: Settings, clock: Clock, pk: str, sk: str) -> dict[str, Any] | None:
    resp = call_with_retry(
        lambda: ddb.get_item(TableName=s.table_name, Key=row_key(pk, sk), ConsistentRead=True), clock
    )
    return resp.get("Item")


def rows_between(ddb: DynamoDBClient, s: Settings, clock: Clock, lower_sk: str, upper_sk: str,
                 *, pk: str) -> dict[str, dict[str, Any]]:
    """Every row of partition ``pk`` with ``lower_sk <= sk <= upper_sk``, strongly consistent, by sk.

    One Query (paginated) for rows due together: it costs the bytes read / 4 KB, where
    reading each row by key costs 1 read unit per row (docs/architecture.md, "Groups")."""
    return {item["sk"]["S"]: item for item in query_from(ddb, s, clock, lower_sk, upper_sk, page_size=0, pk=pk)}


def delete_row(ddb: DynamoDBClient, s: Settings, clock: Clock, pk: str, sk: str) -> None:
    call_with_retry(lambda: ddb.delete_item(TableName=s.table_name, Key=row_key(pk, sk)), clock)


DELETE_BATCH = 25  # BatchWriteItem's limit


def _delete_chunk(ddb: DynamoDBClient, s: Settings, clock: Clock, keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    def write(pending: list[Any]) -> list[Any]:
        resp = ddb.batch_write_item(RequestItems={s.table_name: pending})
        return list(resp.get("UnprocessedItems", {}).get(s.table_name, []))

    requests: list[Any] = [{"DeleteRequest": {"Key": row_key(pk, sk)}} for pk, sk in keys]
    try:
        left = retry_unprocessed(write, requests, clock)
    except Exception as exc:
        obs.log("ERROR", "row delete failed", error=str(exc)[:300], rows=len(requests))
        return list(keys)
    return [(r["DeleteRequest"]["Key"]["pk"]["S"], r["DeleteRequest"]["Key"]["sk"]["S"]) for r in left]


def delete_rows(ddb: DynamoDBClient, s: Settings, clock: Clock, keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Delete rows 25 per BatchWriteItem, ``s.send_workers`` calls at a time (the same write
    units as one DeleteItem per row, far fewer calls); returns the keys left undeleted."""
    chunks = [keys[i : i + DELETE_BATCH] for i in range(0, len(keys), DELETE_BATCH)]
    parts = pmap(lambda c: _delete_chunk(ddb, s, clock, c), chunks, s.send_workers)
    return [key for part in parts for key in part]


def reject_row(
    ddb: DynamoDBClient,
    sqs: SQSClient,
    s: Settings,
    clock: Clock,
    item: dict[str, Any],
    exc: RowRejected,
    source: str,
) -> Rejection:
    """Make a refused row visible, then take it out of the schedule.

    Order matters: the rejection record (with the whole row) reaches the
    rejected-rows queue first, and only then is the row deleted, so a crash in
    between leaves the row for the next attempt rather than losing it.
    """
    now = clock.now_ms()
    rejection = Rejection.of(item, exc, source, now, table=s.table_name)
    obs.log("WARNING", "row rejected", code=rejection.code, reason=rejection.reason, pk=rejection.pk,
            sk=rejection.sk, source=source)
    obs.metric(s, REJECTED_ROWS, 1, timestamp_ms=now, code=rejection.code)
    if not s.rejected_queue_url:
        return rejection
    call_with_retry(
        lambda: sqs.send_message(QueueUrl=s.rejected_queue_url, MessageBody=rejection.body()), clock
    )
    pk, sk = item.get("pk", {}).get("S"), item.get("sk", {}).get("S")
    if isinstance(pk, str) and isinstance(sk, str):
        delete_row(ddb, s, clock, pk, sk)
    return rejection
