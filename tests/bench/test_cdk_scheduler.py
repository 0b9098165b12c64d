"""cdk-scheduler's model (punctual/bench/cdk_scheduler.py), behaviour by behaviour as its source has it
(github guiyom-e/cdk-scheduler@f5eb62c): deterministic runs of the model's pieces."""

from __future__ import annotations

import pytest

from punctual.bench import cdk_scheduler as cdk
from punctual.bench.models import Models
from punctual.bench.report import summarize
from punctual.bench.scenarios import Scenario

HOUR = 3_600_000


def _model(dues: list[int], inserts: list[int] | None = None, **models) -> cdk.CdkScheduler:
    inserts = inserts if inserts is not None else [0] * len(dues)
    sc = Scenario("t", "", inserts, dues, max(dues) + HOUR)
    return cdk.CdkScheduler(sc, Models(**models), seed=1)


def _fill(model: cdk.CdkScheduler) -> None:
    for i in range(model.sc.n):
        model.table.append((model.sc.dues[i], i))
    model.table.sort()


def test_entry_ids_are_the_sks_digits_and_id_and_can_collide():
    assert cdk.sqs_entry_id("1798135200000#order-42") == "1798135200000-order-42"
    assert cdk.sqs_entry_id("1798135200000#a.b") == cdk.sqs_entry_id("1798135200000#a.c") == "1798135200000-a"
    assert cdk.sqs_entry_id("1#a") == cdk.sqs_entry_id("1-a")
    assert len(cdk.sqs_entry_id("1#" + "x" * 200)) == 80


def test_delays_are_floored_and_the_stream_takes_rows_due_in_under_901_s():
    assert cdk.floored_delay_s(10_999, 0) == 10 and cdk.floored_delay_s(0, 5_000) == 0
    assert cdk.near_future(900_999, 0) and not cdk.near_future(901_000, 0)
    assert cdk.near_future(-60_000, 0)  # past due: delay 0, taken


def test_the_cdk_defaults():
    assert (cdk.TIMEOUT_MS, cdk.CDK_MEMORY_MB, cdk.ASYNC_RETRIES, cdk.STREAM_BATCH) == (3_000, 128, 2, 100)
    assert cdk.page_rows(1_048_576) == 16_384  # ~64 B rows in a 1 MB page


def test_colliding_ids_in_a_chunk_fail_the_whole_batch():
    model = _model([HOUR] * 3)
    _fill(model)
    model.sk = lambda i: "1798135200000#same.{i}"  # type: ignore[method-assign]
    with pytest.raises(cdk.SdkCallFailed, match="BatchEntryIdsNotDistinct"):
        model.send_and_delete([0, 1, 2], cdk.Run("cdk-stream", 0, 3_000))
    assert model.counters["cdk_batch_id_collisions"] == 1 and not model.res.deliveries


def test_one_message_per_record_one_delete_call_per_chunk_of_ten():
    model = _model([HOUR + k for k in range(25)], cdk_sdk_cpu_scale=0.0)
    _fill(model)
    run = cdk.Run("cdk-extract", 0, 3_000)
    model.send_and_delete(list(range(25)), run)
    assert run.sent == 25 and len(model.res.deliveries) == 25
    assert model.res.requests[("cdk-extract", "sqs.SendMessageBatch")] == 3
    assert model.res.requests[("cdk-extract", "dynamodb.BatchWriteItem")] == 3
    assert model.table == [] and len(model.shard) == 25  # every delete is a REMOVE record in the stream


def test_deletes_that_fail_are_swallowed_and_the_rows_stay():
    model = _model([HOUR] * 10, cdk_sdk_cpu_scale=0.0)
    _fill(model)
    real_call = model.call

    def call(run, api, **kw):
        real_call(run, api, **kw)
        if api == "dynamodb.BatchWriteItem":
            raise cdk.SdkCallFailed(api)

    model.call = call  # type: ignore[method-assign]
    run = cdk.Run("cdk-extract", 0, 3_000)
    model.send_and_delete(list(range(10)), run)  # no exception: .catch(() => null)
    assert run.sent == 10 and len(model.table) == 10
    assert model.counters["cdk_delete_errors_swallowed"] == 1


def test_failed_entries_are_neither_retried_nor_deleted():
    model = _model([HOUR] * 10)
    _fill(model)
    model.fail = 1.0
    model.call = lambda run, api, **kw: None  # type: ignore[method-assign]
    model.send_and_delete(list(range(10)), cdk.Run("cdk-stream", 0, 3_000))
    assert model.counters["cdk_failed_entries_dropped"] == 10
    assert not model.res.deliveries and len(model.table) == 10


def test_the_refilter_costs_the_whole_page_after_each_chunk():
    """A 1,000-row page (no latency, SDK CPU free): after each of its 100 chunks the re-filter runs over
    all 1,000 rows, 0.6 us each at one vCPU, ~8 ms at 128 MB: ~0.8 s in all, quadratic in the page."""
    no_latency = {"dynamodb": (0, 0), "sqs": (0, 0), "events": (0, 0)}
    model = _model([HOUR] * 1_000, cdk_sdk_cpu_scale=0.0, api_latency_ms=no_latency)
    _fill(model)
    run = cdk.Run("cdk-extract", 0, 3_000)
    model.send_and_delete(list(range(1_000)), run)
    assert run.now == 100 * round(0.6 * 1_000 / 1_000 * 1_769 / 128)


def test_an_extract_of_a_big_page_times_out_at_3_s_leaving_the_rest_in_the_table():
    """5,000 rows due 10 min ahead: the extract sends part of them before its 3 s (the re-filter of the whole
    page after each chunk), the rest stays; a chunk sent but not yet deleted at the deadline stays too (its
    rows are sent again by the next extract: duplicates)."""
    model = _model([10 * 60_000 + k for k in range(5_000)], cdk_sdk_cpu_scale=0.0)
    _fill(model)
    ok, end = model.invoke("cdk-extract", 0, model.extract_handler)
    assert not ok and model.counters["cdk_timeouts:cdk-extract"] == 1
    sent = len(model.res.deliveries)
    assert 0 < sent < 5_000 and 0 <= len(model.table) - (5_000 - sent) <= cdk.SQS_BATCH
    assert model.res.invocations[-1].duration_ms == end  # billed up to the deadline, after the cold start


def test_with_the_sdks_cpu_a_full_page_query_alone_outlasts_the_timeout():
    model = _model([10 * 60_000 + k for k in range(16_384)])
    _fill(model)
    ok, _ = model.invoke("cdk-extract", 0, model.extract_handler)
    assert not ok and not model.res.deliveries and len(model.table) == 16_384


def test_removes_invoke_the_stream_handler_and_a_failing_batch_holds_the_shard():
    """Rows due in 20 min: the stream handler skips them, the extract (run by hand) sends and deletes them,
    and their REMOVE records invoke the stream handler again. A stream batch that keeps failing is retried
    and nothing after it is handled meanwhile."""
    model = _model([20 * 60_000, 20 * 60_000 + 1], inserts=[0, 0], cdk_sdk_cpu_scale=0.0)
    result = model.run()
    s = summarize(result)
    assert s.lost == 0 and s.delivered == 2
    assert result.counters["cdk_stream_invocations_for_removes_only"] >= 1

    stuck = _model([5_000, 6_000], inserts=[0, 1_000], cdk_sdk_cpu_scale=0.0)
    calls: list[int] = []
    real = stuck.near_future_handler

    def failing_first_batch(batch, run):
        calls.append(run.now)
        if batch[0][2] == 0 and len(calls) <= 5:
            raise cdk.SdkCallFailed("poison")
        real(batch, run)

    stuck.near_future_handler = failing_first_batch  # type: ignore[method-assign]
    stuck.run()
    assert stuck.counters["cdk_stream_batches_retried"] == 5
    first_ok = stuck.res.deliveries[1][0]
    assert first_ok > 5 * stuck.m.stream_retry_delay_ms  # the second row waited behind the retried batch
