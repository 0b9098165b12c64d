"""Which partitions hold the tasks: ``Settings.shards`` (docs/architecture.md, "Shards").

Pure. One DynamoDB partition key value serves at most 1,000 write and 3,000 read units a second
(docs/planning.md, "One partition's ceiling"). With ``shards = 1`` every task is under the
partition key value itself, cdk-scheduler's row format. With ``N > 1`` a task is under
``"<value>#<crc32(utf-8 id) mod N>"``, e.g. ``scheduler#7``: the client and the CLI derive it, a
raw producer applies the same rule (README, "Shards"). The poller reads every shard's window and
the bare value too, so rows written before the table was sharded, or by a producer that ignores
the rule, are still delivered (only the client's lookups by id need the rule).
"""

from __future__ import annotations

import zlib

from .keys import SEPARATOR

MAX_SHARDS = 64
SHARD_SEPARATOR = "#"


def shard_of(task_id: str, shards: int) -> int:
    """The shard (0..shards-1) of a task id: CRC-32 (zlib's, IEEE) of its UTF-8 bytes mod ``shards``."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be 1..{MAX_SHARDS}, got {shards}")
    return zlib.crc32(task_id.encode("utf-8", "surrogatepass")) % shards


def partition_for(value: str, shards: int, task_id: str) -> str:
    """The partition key a task with ``task_id`` is written under."""
    if shards == 1:
        return value
    return f"{value}{SHARD_SEPARATOR}{shard_of(task_id, shards)}"


def task_id_of(sk: str) -> str:
    """The id part of a sort key ``"<epoch-ms>#<id>"`` (or of ``"#<id>"``): what the shard is
    derived from. A key without ``#`` (a malformed row) is its own id."""
    return sk.split(SEPARATOR, 1)[-1]


def partitions(value: str, shards: int) -> tuple[str, ...]:
    """Every partition the scheduler reads: the bare value first, then each shard's."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be 1..{MAX_SHARDS}, got {shards}")
    if shards == 1:
        return (value,)
    return (value, *(f"{value}{SHARD_SEPARATOR}{i}" for i in range(shards)))
