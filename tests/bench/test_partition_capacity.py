"""DynamoDB's per-partition limits in the benchmark (punctual.bench.capacity, issue 14): a
partition key value takes 1,000 write and 3,000 read units a second, over that the in-memory
AWS refuses the call with the error DynamoDB returns; the firehose scenario runs against it."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from punctual.bench.capacity import THROTTLED_CODE, PartitionCapacity
from punctual.bench.fastaws import BenchAws
from punctual.bench.models import Models
from punctual.bench.report import strategy_figures, summarize
from punctual.bench.run import run_scenario
from punctual.bench.scenarios import build


class _Clock:
    def __init__(self) -> None:
        self.ms = 0

    def now_ms(self) -> int:
        return self.ms


def _refused(cap: PartitionCapacity, per_s: int, seconds: int, kind: Any = "write", pk: str = "p") -> int:
    """Requests of one unit, evenly spaced at ``per_s`` a second for ``seconds``: how many were refused."""
    n = per_s * seconds
    return sum(not cap.admit(pk, kind, 1, k * 1000 // per_s) for k in range(n))


def test_a_partition_takes_its_limit_sustained_and_refuses_what_is_over_it():
    assert _refused(PartitionCapacity(1_000, 3_000), 1_000, 10) == 0
    assert _refused(PartitionCapacity(1_000, 3_000), 3_000, 10, kind="read") == 0
    # 1,200 a second for 10 s: 12,000 asked, 10,000 refilled + 1 s of burst admitted
    refused = _refused(PartitionCapacity(1_000, 3_000), 1_200, 10)
    assert 900 <= refused <= 1_100


def test_partitions_and_kinds_have_their_own_buckets_and_a_pause_refills_one():
    cap = PartitionCapacity(1_000, 3_000)
    assert all(cap.admit("a", "write", 1, 0) for _ in range(1_000))  # one second of burst at once
    assert not cap.admit("a", "write", 1, 0)
    assert cap.admit("b", "write", 1, 0) and cap.admit("a", "read", 1, 0)
    assert cap.admit("a", "write", 1, 1)  # 1 ms refills one write unit
    assert cap.throttled == {("a", "write"): 1}


def test_the_fake_raises_what_dynamodb_raises_and_batch_writes_return_the_rest_unprocessed():
    clock = _Clock()
    aws = BenchAws(clock=clock, capacity=PartitionCapacity(1_000, 3_000, burst_ms=10))  # 10 units
    item = {"pk": {"S": "p"}, "sk": {"S": "0"}}
    for k in range(10):
        aws.op_put_item(TableName="punctual", Item={**item, "sk": {"S": str(k)}})
    with pytest.raises(ClientError) as err:
        aws.op_put_item(TableName="punctual", Item=item)
    assert err.value.response["Error"]["Code"] == THROTTLED_CODE == "ProvisionedThroughputExceededException"
    assert err.value.response["ThrottlingReasons"][0]["reason"] == "TableWriteKeyRangeThroughputExceeded"
    assert ("p", "9") in aws.items and len(aws.items) == 10

    clock.ms = 4  # 4 units back
    deletes = [{"DeleteRequest": {"Key": {"pk": {"S": "p"}, "sk": {"S": str(k)}}}} for k in range(6)]
    resp = aws.op_batch_write_item(RequestItems={"punctual": deletes})
    assert resp["UnprocessedItems"] == {"punctual": deletes[4:]}
    assert len(aws.items) == 6
    with pytest.raises(ClientError):  # none admitted: the whole call is throttled
        aws.op_batch_write_item(RequestItems={"punctual": deletes[4:]})


def test_the_quick_firehose_is_throttled_yet_loses_nothing_and_is_never_early():
    sc = build("firehose", seed=1, quick=True)
    assert sc.throttling and sc.n == 3_000
    (r,) = run_scenario("firehose", seed=1, quick=True, models=Models(), strategies=("punctual",), backend="fake")
    s = summarize(r)

    assert s.lost == 0 and s.early == 0 and s.delivered == s.n
    # 3,000 puts a second: over the partition's 1,000 write units, so the producer is throttled and retries
    assert s.throttled_user_puts and s.throttled_user_puts > 0
    assert s.throttled_requests and s.throttled_requests >= s.throttled_user_puts
    figures = strategy_figures(s)
    assert figures["throttled_requests"] == s.throttled_requests
    assert figures["throttled_user_puts"] == s.throttled_user_puts


def test_scenarios_without_the_limits_report_no_throttling_keys():
    (r,) = run_scenario("idle", seed=1, quick=True, models=Models(), strategies=("punctual",), backend="fake")
    s = summarize(r)
    assert s.throttled_requests is None and "throttled_requests" not in strategy_figures(s)


def test_bench_shards_spread_the_firehose_so_nothing_is_throttled(tmp_path):
    """``punctual bench --scenario firehose --shards 16 --json FILE``: 3,000 puts a second over 16
    partitions (~190 each, under the 1,000 write units) are not throttled at all; one partition is."""
    import argparse
    import json

    from punctual.bench.run import add_arguments, main

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    figures = {}
    for shards in (1, 16):
        out = tmp_path / f"s{shards}.json"
        args = parser.parse_args(["--scenario", "firehose", "--quick", "--strategy", "punctual", "--backend", "fake",
                                  "--no-plots", "--out", str(tmp_path), "--shards", str(shards), "--json", str(out)])
        assert main(args) == 0
        doc = json.loads(out.read_text())
        assert doc["scenario"] == "firehose" and doc["tasks"] == 3_000
        figures[shards] = doc["strategies"]["punctual"]
    assert figures[1]["throttled_user_puts"] > 0
    assert figures[16]["throttled_requests"] == 0 and figures[16]["throttled_user_puts"] == 0
    for f in figures.values():
        assert f["lost"] == 0 and f["early"] == 0 and f["delivered"] == 3_000
    # with the client's CPU counted (issue 29) 142 ms, seed 1 (< 100 ms with the CPU free); < 100 ms is
    # issue 29's target for the delivery path, not a property of this model yet
    assert figures[16]["p99_ms"] < 250
    assert "--shards 16" in json.loads((tmp_path / "results-firehose.json").read_text())["command"]
    with pytest.raises(SystemExit, match="shards must be 1..64"):
        main(parser.parse_args(["--scenario", "firehose", "--quick", "--backend", "fake", "--no-plots",
                                "--out", str(tmp_path), "--shards", "0"]))
