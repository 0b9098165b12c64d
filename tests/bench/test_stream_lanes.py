"""The benchmark's DynamoDB stream (punctual/bench/punctual_sim.py; models.SOURCES "stream_shards",
"stream_parallelization"): a record is read in the lane its partition key picks, one batch at a
time per lane and in order, lanes side by side; so shards > 1 edit a burst of inserts in
parallel, as Lambda does with ParallelizationFactor (the construct's EDITOR_PARALLELIZATION)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from punctual.bench.models import Models
from punctual.bench.punctual_sim import EPOCH_MS, PunctualSim
from punctual.bench.report import summarize
from punctual.bench.scenarios import build

# the editor's handler as the simulator runs it (punctual_sim.lambda_handler): its use case is spied on there
EDITOR_HANDLER = importlib.import_module("punctual.functions.editor.handler")


def _edited(monkeypatch: pytest.MonkeyPatch, shards: int) -> tuple[Any, list[tuple[int, int, list[tuple[str, int]]]]]:
    """The quick firehose (3,000 inserts in 1 s): its summary and every editor batch as
    (virtual start, virtual end, [(partition key, sequence number)])."""
    batches: list[tuple[int, int, list[tuple[str, int]]]] = []
    real = EDITOR_HANDLER.process_stream
    sim = PunctualSim(build("firehose", seed=1, quick=True), Models(), 1, settings={"shards": shards},
                      backend="fake")

    def spy(event: dict[str, Any], deps: Any) -> Any:
        start = sim.engine.now
        out = real(event, deps)
        batches.append((start, sim.engine.now, [(r["dynamodb"]["Keys"]["pk"]["S"],
                                                 int(r["dynamodb"]["SequenceNumber"])) for r in event["Records"]]))
        return out

    monkeypatch.setattr(EDITOR_HANDLER, "process_stream", spy)
    return summarize(sim.run()), batches


def _max_overlap(spans: list[tuple[int, int]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    now = peak = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def test_one_partition_key_is_one_lane_and_sixteen_shards_edit_side_by_side(monkeypatch):
    figures = {}
    for shards in (1, 16):
        s, batches = _edited(monkeypatch, shards)
        assert s.lost == 0 and s.early == 0 and s.delivered == 3_000
        keys = {pk for _, _, recs in batches for pk, _ in recs}
        assert len(keys) == shards
        # every insert reached an editor
        assert len({seq for _, _, recs in batches for _, seq in recs}) >= 3_000
        for pk in keys:
            mine = [(a, b, [q for k, q in recs if k == pk]) for a, b, recs in batches if any(k == pk for k, _ in recs)]
            # one key's records: one batch at a time, in the stream's order
            assert _max_overlap([(a, b) for a, b, _ in mine]) == 1
            seqs = [q for _, _, qs in sorted(mine) for q in qs]
            assert seqs == sorted(seqs)
        figures[shards] = (_max_overlap([(a, b) for a, b, _ in batches]), max(b for _, b, _ in batches) - EPOCH_MS)
    concurrent_1, drained_1 = figures[1]
    concurrent_16, drained_16 = figures[16]
    assert concurrent_1 == 1
    assert concurrent_16 >= 8
    # the burst's inserts (inserted over 1 s, longer with one shard's throttled puts) are all edited
    # in well under half the time one lane takes: 3.3 s against 14.5 s measured
    assert drained_16 < drained_1 / 2


def test_a_record_the_editor_always_fails_is_discarded_alone_after_the_retries(monkeypatch):
    """lambda_events.stream_after_failure in the simulator: the lane retries from the checkpoint,
    discards the failing record after stream_max_retries and goes on with the ones after it."""
    real = EDITOR_HANDLER.process_stream
    sim = PunctualSim(build("firehose", seed=1, quick=True), Models(), 1, backend="fake")  # one lane: full batches
    poison: list[str] = []  # the sequence number of the first batch's third record
    with_poison: list[list[str]] = []
    without: set[str] = set()

    def spy(event: dict[str, Any], deps: Any) -> Any:
        seqs = [r["dynamodb"]["SequenceNumber"] for r in event["Records"]]
        if not poison and len(seqs) >= 3:
            poison.append(seqs[2])
        if not poison or poison[0] not in seqs:
            without.update(seqs)
            return real(event, deps)
        with_poison.append(seqs)
        i = seqs.index(poison[0])
        done = real({"Records": event["Records"][:i]}, deps) if i else {"batchItemFailures": []}
        return {"batchItemFailures": [*done["batchItemFailures"], {"itemIdentifier": poison[0]}]}

    monkeypatch.setattr(EDITOR_HANDLER, "process_stream", spy)
    result = sim.run()
    s = summarize(result)
    assert s.lost == 0 and s.early == 0
    assert len(with_poison) == 1 + sim.m.stream_max_retries
    assert all(seqs[0] == poison[0] for seqs in with_poison[1:])  # retried from the checkpoint
    after = with_poison[-1][1:]
    assert after and set(after) <= without  # the records after it went on, without it
    assert result.counters["editor_records_to_dlq"] == 1
