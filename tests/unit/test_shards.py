"""Which partition holds a task (core/shards.py): the rule raw producers reimplement (README, "Shards")."""

from __future__ import annotations

from collections import Counter

import pytest

from punctual.core.config import Settings, load_settings, to_environment
from punctual.core.keys import encode_sk
from punctual.core.models import RowRejected, task_from_item
from punctual.core.shards import MAX_SHARDS, partition_for, partitions, shard_of, task_id_of


def test_the_shard_is_crc32_of_the_utf8_id_mod_n():
    """CRC-32/IEEE's published check value (0xCBF43926 for "123456789") pins the function: what
    Java's CRC32, Go's crc32.ChecksumIEEE and Node's zlib.crc32 compute too."""
    assert 0xCBF43926 % 16 == 6
    assert shard_of("123456789", 16) == 6
    assert shard_of("123456789", 64) == 0xCBF43926 % 64 == 38
    assert shard_of("é", 64) == 235179326 % 64  # UTF-8 bytes c3 a9, not Latin-1
    assert shard_of("anything", 1) == 0


def test_one_shard_is_the_bare_partition_cdk_schedulers_row_format():
    assert partition_for("scheduler", 1, "order-42") == "scheduler"
    assert partitions("scheduler", 1) == ("scheduler",)
    assert Settings().partitions == ("scheduler",)
    assert Settings().partition_for("order-42") == "scheduler"


def test_n_shards_read_the_bare_value_and_every_shard():
    assert partitions("jobs", 4) == ("jobs", "jobs#0", "jobs#1", "jobs#2", "jobs#3")
    assert partition_for("jobs", 4, "order-42") == "jobs#2"
    s = Settings(partition_key_value="jobs", shards=4)
    assert s.partition_for_key(encode_sk(1_798_761_600_000, "order-42")) == "jobs#2"
    assert s.partition_for_key("#order-42") == "jobs#2"  # the id may itself hold '#'
    assert task_id_of("1798761600000#a#b") == "a#b"


def test_ids_spread_evenly_over_the_shards():
    counts = Counter(shard_of(f"task-{i}", 16) for i in range(16_000))
    assert set(counts) == set(range(16))
    assert max(counts.values()) < 1.15 * 1000 and min(counts.values()) > 0.85 * 1000, counts


@pytest.mark.parametrize("bad", [0, -1, MAX_SHARDS + 1])
def test_shards_out_of_range_are_refused(bad):
    with pytest.raises(ValueError, match=f"shards must be 1..{MAX_SHARDS}"):
        shard_of("x", bad)
    with pytest.raises(ValueError, match=f"shards must be 1..{MAX_SHARDS}"):
        Settings(shards=bad)


def test_shards_come_from_the_environment():
    s = load_settings({"PUNCTUAL_SHARDS": "16"})
    assert s.shards == 16 and len(s.partitions) == 17
    assert to_environment(s)["PUNCTUAL_SHARDS"] == "16"
    with pytest.raises(ValueError, match="shards must be 1..64"):
        load_settings({"PUNCTUAL_SHARDS": "65"})


def _row(pk: str) -> dict:
    return {"pk": {"S": pk}, "sk": {"S": encode_sk(1_798_761_600_000, "order-42")}, "payload": {"M": {}}}


def test_a_row_under_any_of_the_partitions_is_a_task_and_any_other_pk_is_rejected():
    s = Settings(shards=4)
    for pk in s.partitions:
        assert task_from_item(_row(pk), s.partitions).pk == pk
    for pk in ("scheduler#4", "scheduler#", "other", "__punctual__"):
        with pytest.raises(RowRejected) as err:
            task_from_item(_row(pk), s.partitions)
        assert err.value.code == "wrong_pk"
        assert "one of the scheduler's 5 partitions" in err.value.reason
    with pytest.raises(RowRejected, match="is not the scheduler partition 'scheduler'"):
        task_from_item(_row("scheduler#0"), Settings().partitions)
