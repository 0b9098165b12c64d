"""DynamoDB access for task rows (low-level client, attribute-value items).

Takes a client; never imports boto3. Every call retries throttling with the one policy of
``retry.py`` (bounded by the invocation's deadline).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from . import observability as obs
from .clock import Clock
from .config import ATTR_EXPIRES, META_PK, Settings
from .errors import is_conditional_failure
from .keys import due_second, fence_key
from .metrics_names import REJECTED_ROWS
from .models import (
    ATTR_ATTEMPT,
    ATTR_CLAIM,
    ATTR_DIRECT,
    ATTR_ENQUEUED_MS,
    ATTR_TAKEOVERS,
    ATTR_WRITTEN_MS,
    Rejection,
    RowRejected,
    RowSend,
    Task,
)
from .parallel import Skipped, pmap, pmap_or_stop
from .planning import claimed_by_dead_work
from .retry import call_with_retry, time_left_ms

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
          token: str | None = None, take_over: Container[str] = ()) -> int | None:
    """Mark ``task`` as sent at ``now_ms`` (by ``token``) before sending it: the row's attempt
    number for this send (its pointer carries it: the consumer's fence checks it), or None if
    someone else did.

    Conditional on the row still existing (a cancelled row is never resurrected)
    and on its send mark being what we read (so the editor and concurrent polls
    never both send the same row). A claim without a token removes an older one.

    A row still claimed with ``token`` was claimed by an earlier attempt of this very work, which
    died (Lambda retries a poll or a stream batch only after it failed), most likely before its
    send; so was a row claimed with a token of ``take_over`` (a poll whose lease this one took
    over): the claim then takes over that attempt's count instead of adding one (attempts count
    sends that reached the delay queue, docs/architecture.md "Attempts count sends that reached the
    queue"; a crash after each claim, retried, used a row's attempts up). The earlier send, if it
    was made, is then stale: its pointer is older than the row's new mark (``RowSend.holds``).
    """
    def write(cond: str, counted: bool, **values: Any) -> int | None:
        return _claim_write(ddb, s, clock, task, now_ms, token, cond, counted, values)

    if task.enqueued_ms is None:  # unsent as read
        got = write("attribute_exists(sk) AND attribute_not_exists(#e)", True)
        if got is None and token is not None:  # or claimed since by an earlier attempt of the same work
            got = write("attribute_exists(sk) AND #c = :tok", False)
        return got
    prev = {":prev": {"N": str(task.enqueued_ms)}}
    died = claimed_by_dead_work(task, take_over) or (token is not None and task.claim_token == token)
    return write("attribute_exists(sk) AND #e = :prev", not died, **prev)


def _claim_write(ddb: DynamoDBClient, s: Settings, clock: Clock, task: Task, now_ms: int, token: str | None,
                 cond: str, counted: bool, extra: dict[str, Any]) -> int | None:
    """One conditional claim write (see :func:`claim`): the row's attempt after it, None if the
    condition failed. ``counted``: the attempt grows by one (else it stays: a crashed attempt's)."""
    values: dict[str, Any] = {":now": {"N": str(now_ms)}, ":one": {"N": "1"}, ":zero": {"N": "0"}, **extra}
    names = {"#e": ATTR_ENQUEUED_MS, "#a": ATTR_ATTEMPT, "#c": ATTR_CLAIM}
    update = "SET #e = :now, #a = if_not_exists(#a, :zero) + :one"
    if not counted:  # the attempt stays; the takeover is counted instead
        names["#k"] = ATTR_TAKEOVERS
        update = "SET #e = :now, #a = if_not_exists(#a, :zero) + :zero, #k = if_not_exists(#k, :zero) + :one"
    if s.direct:  # the send is the delivery: cancels answer AlreadyEnqueued from here on
        update += ", #d = :one"
        names["#d"] = ATTR_DIRECT
    if task.written_ms is not None:  # written after its due time: lateness counts from then (Task.ready_ms)
        update += ", #w = :written"
        names["#w"] = ATTR_WRITTEN_MS
        values[":written"] = {"N": str(task.written_ms)}
    if token is not None:
        update += ", #c = :tok"
        values[":tok"] = {"S": token}
    else:
        update += " REMOVE #c"
    applied = conditional_update(
        ddb,
        clock,
        TableName=s.table_name,
        Key=row_key(task.pk, task.sk),
        UpdateExpression=update,
        ConditionExpression=cond,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
        # a count taken over may leave the attempt as it was: UPDATED_NEW need not return it
        ReturnValues="UPDATED_NEW" if counted else "ALL_NEW",
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
    removed = "#e, #d" if s.direct else "#e"  # direct delivery: its mark too, so cancellable again
    update = f"REMOVE {removed}" if counts else f"REMOVE {removed} SET #a = #a - :one"
    values: dict[str, Any] = {":mine": {"N": str(claimed_ms)}}
    names = {"#e": ATTR_ENQUEUED_MS, **({} if counts else {"#a": ATTR_ATTEMPT}), **({"#d": ATTR_DIRECT} if s.direct else {})}
    if not counts:
        values[":one"] = {"N": "1"}
    applied = conditional_update(
        ddb,
        clock,
        TableName=s.table_name,
        Key=row_key(task.pk, task.sk),
        UpdateExpression=update,
        ConditionExpression="#e = :mine",
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )
    return applied is not None


def fence_second(ddb: DynamoDBClient, s: Settings, clock: Clock, task_pk: str, due_ms: int, now_ms: int) -> None:
    """Fence the due second holding ``due_ms`` in partition ``task_pk``: from now on a cancel or a
    reschedule of any task due in that second answers AlreadyDelivered (client.cancel checks this
    item in its transaction). One item in the meta partition per partition and second, written
    before the rows are read; idempotent (every run and every consumer delivering that second writes
    the same item, its first time kept); it expires a day after the second (DynamoDB's TTL on
    ``ATTR_EXPIRES``). Raises when the table fails (docs/architecture.md, "Cancellation never lies")."""
    second = due_second(due_ms)
    call_with_retry(lambda: ddb.update_item(
        TableName=s.table_name, Key=row_key(META_PK, fence_key(task_pk, due_ms)),
        UpdateExpression="SET #f = if_not_exists(#f, :now), #x = if_not_exists(#x, :exp)",
        ExpressionAttributeNames={"#f": "fenced_ms", "#x": ATTR_EXPIRES},
        ExpressionAttributeValues={":now": {"N": str(now_ms)}, ":exp": {"N": str(second // 1000 + FENCE_TTL_S)}}),
        clock)


FENCE_TTL_S = 86_400  # a fence expires a day after its second


def restart_orphan_clock(ddb: DynamoDBClient, s: Settings, clock: Clock, send: RowSend, now_ms: int) -> bool:
    """A row whose event SQS did not take: its send mark set to ``now_ms`` while it is still this
    send, so the poll leaves it to the copy of its pointer that retries (that copy carries
    ``now_ms``) instead of taking it for an orphan and using an attempt."""
    return conditional_update(
        ddb, clock, TableName=s.table_name, Key=row_key(send.pk, send.sk), UpdateExpression="SET #e = :now",
        ConditionExpression=SAME_SEND, ExpressionAttributeNames=_SEND_NAMES,
        ExpressionAttributeValues={**_send_values(send), ":now": {"N": str(now_ms)}}) is not None


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


# A row is still the send a pointer names while it holds that send's attempt and a send mark no
# later than the pointer's (a put over the key since has no mark, or a later one once claimed).
SAME_SEND = "#a = :att AND #e <= :enq"
_SEND_NAMES = {"#a": ATTR_ATTEMPT, "#e": ATTR_ENQUEUED_MS}


def _send_values(send: RowSend) -> dict[str, Any]:
    return {":att": {"N": str(send.attempt)}, ":enq": {"N": str(send.enqueued_ms)}}


# A transaction's item whose condition failed (its code in CancellationReasons).
CHECK_FAILED = "ConditionalCheckFailed"


def cancellation_codes(exc: BaseException) -> list[str]:
    """The per-item codes of a TransactionCanceledException ("None", "ConditionalCheckFailed", ...)."""
    response = getattr(exc, "response", None)
    reasons = response.get("CancellationReasons") if isinstance(response, dict) else None
    return [str(r.get("Code")) for r in reasons] if isinstance(reasons, list) else []


def _delete_one(ddb: DynamoDBClient, s: Settings, send: RowSend) -> bool:
    """A row's conditional DeleteItem; False when the row was written over since."""
    try:
        ddb.delete_item(TableName=s.table_name, Key=row_key(send.pk, send.sk), ConditionExpression=SAME_SEND,
                        ExpressionAttributeNames=_SEND_NAMES, ExpressionAttributeValues=_send_values(send))
    except Exception as exc:
        if is_conditional_failure(exc):
            return False
        raise
    return True


def delete_sent(ddb: DynamoDBClient, s: Settings, clock: Clock, sends: list[RowSend],
                until_ms: int | None = None) -> tuple[list[RowSend], list[RowSend], list[RowSend]]:
    """Delete delivered rows while each is still the send delivered: a conditional DeleteItem a
    row (1 write unit, where a transaction's delete costs 2), ``s.send_workers`` calls at a time.
    Returns (the rows written over since, left in place: new tasks; the rows not deleted now: the
    table refused, after which the rest are not tried, or the invocation's time ran short; the rows
    not tried because ``until_ms`` came: the next rows due, which the deletes must not hold back)."""
    unique = list({(r.pk, r.sk): r for r in sends}.values())

    def one(send: RowSend) -> bool:
        left_ms = time_left_ms(clock)
        if left_ms is not None and left_ms < DELETE_RESERVE_MS:
            raise Skipped()  # what is left goes to a delete-only copy of its pointer, in time
        if until_ms is not None and clock.now_ms() >= until_ms:
            raise _NotNow()
        return call_with_retry(lambda: _delete_one(ddb, s, send), clock)

    results = pmap_or_stop(one, unique, s.send_workers)
    # stopped by ``until_ms`` (not by a failure): the rows not tried are for later in the invocation
    not_now = any(isinstance(exc, _NotNow) for _, _, exc in results) and all(
        exc is None or isinstance(exc, Skipped) for _, _, exc in results)
    written_over: list[RowSend] = []
    left: list[RowSend] = []
    untried: list[RowSend] = []
    for send, deleted, exc in results:
        if exc is None:
            if not deleted:
                written_over.append(send)
        elif not_now:
            untried.append(send)
        else:
            if not isinstance(exc, Skipped):
                obs.log("ERROR", "row delete failed", sk=send.sk, error=obs.error_text(exc))
            left.append(send)
    return written_over, left, untried


class _NotNow(Skipped):
    """Not tried: the time given for these deletes is up."""


# The deletes after delivery stop this long before the invocation's deadline: the rows left are
# handed to a delete-only copy of their pointer (deliver.retry_later), never to a timeout.
DELETE_RESERVE_MS = 1000


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
