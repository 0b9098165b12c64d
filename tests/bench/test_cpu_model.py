"""The client CPU model (punctual/bench/cpu.py): measured per call type and size, scaled by the function's
memory, charged in full inside a parallel section (the GIL), and what the simulator adds to a handler."""

from __future__ import annotations

import pytest

from punctual.bench import cpu
from punctual.bench.client_cpu_table import OPS
from punctual.bench.models import Models
from punctual.core.parallel import pmap, run_in_order
from tests.bench.sim_support import bare_sim, time_in_consumer


def test_memory_gives_a_share_of_one_vcpu_and_never_more():
    assert cpu.vcpu_share(1769) == 1.0
    assert cpu.vcpu_share(3008) == 1.0  # one thread: never more than one vCPU
    assert cpu.vcpu_share(512) == pytest.approx(512 / 1769)
    small = OPS["dynamodb.UpdateItem"]["base_ms"]
    assert cpu.request_cpu_ms("dynamodb.UpdateItem", {}, 1769) == pytest.approx(small)
    assert cpu.request_cpu_ms("dynamodb.UpdateItem", {}, 512) == pytest.approx(small * 1769 / 512)
    assert cpu.request_cpu_ms("dynamodb.UpdateItem", {}, 512, scale=0.0) == 0.0


def test_the_measured_table_has_the_issues_orders_of_magnitude():
    """Issue 29's measurement here: ~0.9 ms a small call, ~3.2 ms a Query of 100, ~4.1 ms a BatchGetItem of
    100, ~1.2 ms a BatchWriteItem of 25 (a rerun on a busy machine moves them, not by 2x)."""
    def at(api: str, n: int) -> float:
        return OPS[api]["base_ms"] + OPS[api]["per_item_ms"] * n

    assert 0.5 <= at("dynamodb.UpdateItem", 1) <= 1.8
    assert 2.0 <= at("dynamodb.Query", 100) <= 6.5
    assert 2.5 <= at("dynamodb.BatchGetItem", 100) <= 8.0
    assert 0.8 <= at("dynamodb.BatchWriteItem", 25) <= 2.4
    assert at("dynamodb.Query", 100) > 2 * at("dynamodb.Query", 1)


def test_batches_cost_by_entries_and_reads_by_rows_returned():
    ten = {"Entries": [{"Id": str(i)} for i in range(10)]}
    send = OPS["sqs.SendMessageBatch"]
    assert cpu.request_cpu_ms("sqs.SendMessageBatch", ten, 1769) == pytest.approx(
        send["base_ms"] + 10 * send["per_item_ms"])
    writes = {"RequestItems": {"t": [{}] * 25}}
    assert cpu.request_items("dynamodb.BatchWriteItem", writes) == 25
    # a Query's request costs its base whatever it asks; its rows cost on the way back
    query = OPS["dynamodb.Query"]
    assert cpu.request_cpu_ms("dynamodb.Query", {"Limit": 1000}, 1769) == pytest.approx(query["base_ms"])
    rows = {"Items": [{}] * 100}
    assert cpu.response_cpu_ms("dynamodb.Query", rows, 1769) == pytest.approx(100 * query["per_item_ms"])
    assert cpu.response_items("dynamodb.BatchGetItem", {"Responses": {"t": [{}] * 7}}) == 7
    assert cpu.response_cpu_ms("sqs.SendMessageBatch", {"Successful": [{}] * 10}, 1769) == 0.0


def test_a_call_type_not_measured_costs_a_small_call():
    assert cpu.request_cpu_ms("sqs.ChangeMessageVisibility", {}, 1769) == pytest.approx(
        OPS[cpu.SMALL_CALL]["base_ms"])


def test_virtual_time_moves_in_whole_ms_and_carries_the_fraction():
    carry, total = 0.0, 0
    for _ in range(10):
        whole, carry = cpu.whole_ms(carry, 0.35)
        total += whole
    assert total == 3 and carry == pytest.approx(0.5)


def _section_ms(scale: float, calls: int = 16) -> int:
    """Virtual ms a consumer spends on ``calls`` GetItem calls made in one parallel section of 16 lanes,
    with a fixed 16 ms DynamoDB latency."""
    models = Models(api_latency_ms={"dynamodb": (16, 16), "sqs": (5, 15), "events": (20, 60)},
                    client_cpu_scale=scale, cold_start_ms=(0, 0))
    sim = bare_sim(models)
    key = {"pk": {"S": "scheduler"}, "sk": {"S": "1798761660000#x"}}

    def section() -> None:
        with run_in_order():
            pmap(lambda _: sim.h_ddb.get_item(TableName=sim.settings.table_name, Key=key), range(calls), workers=16)

    return time_in_consumer(sim, section)


def test_a_parallel_section_overlaps_latency_but_not_cpu():
    """16 calls on 16 lanes: 1 ms of latency each (16 / 16), but every call's CPU in full at 512 MB."""
    per_call = cpu.request_cpu_ms("dynamodb.GetItem", {}, 512)
    assert _section_ms(scale=0.0) == 16
    assert _section_ms(scale=1.0) - 16 == int(16 * per_call)
