"""Lambda's event-source rules, shared by the local stack, the benchmark and the test harnesses
(punctual/lambda_events.py): what stays on the SQS queue, where a stream checkpoint moves, when a
rule fires, what the Scheduled Event looks like."""

from __future__ import annotations

import pytest

from punctual.core.cron import one_shot_cron
from punctual.lambda_events import (
    ASYNC_RETRY_DELAYS_MS,
    InjectedCrash,
    armed_minute,
    filtered_batch_done,
    scheduled_event,
    sqs_messages_to_keep,
    stream_after_failure,
    stream_records_done,
)

IDS = ["m1", "m2", "m3"]
SEQS = ["100", "200", "300"]
MINUTE_MS = 1_798_761_600_000  # 2027-01-01T00:00Z


def failures(*ids: object) -> dict[str, object]:
    return {"batchItemFailures": [{"itemIdentifier": i} for i in ids]}


@pytest.mark.parametrize("result", [None, "ok", 42, {}, {"batchItemFailures": None}, {"batchItemFailures": []}])
def test_a_batch_without_reported_failures_is_deleted_whole(result: object) -> None:
    assert sqs_messages_to_keep(result, IDS) == set()
    assert stream_records_done(result, SEQS) == len(SEQS)


def test_reported_messages_stay_on_the_queue_the_others_are_deleted() -> None:
    assert sqs_messages_to_keep(failures("m3", "m1"), IDS) == {"m1", "m3"}


@pytest.mark.parametrize("result", [
    failures("not-in-the-batch"),
    failures(""),
    failures(None),
    {"batchItemFailures": [{"id": "m1"}]},
    {"batchItemFailures": ["m1"]},
    {"batchItemFailures": "m1"},
])
def test_an_invalid_partial_response_fails_the_whole_batch(result: object) -> None:
    assert sqs_messages_to_keep(result, IDS) == set(IDS)
    assert stream_records_done(result, SEQS) == 0


def test_without_report_batch_item_failures_the_response_is_ignored() -> None:
    assert sqs_messages_to_keep(failures("m1"), IDS, report_failures=False) == set()
    assert stream_records_done(failures("200"), SEQS, report_failures=False) == len(SEQS)


def test_the_stream_checkpoint_stops_before_the_first_failed_record() -> None:
    assert stream_records_done(failures("300", "200"), SEQS) == 1  # retried from 200, in order
    assert stream_records_done(failures("100"), SEQS) == 0
    assert stream_records_done(failures("300"), SEQS) == 2


def test_filtered_out_records_count_as_done_but_never_past_a_failed_one() -> None:
    # a batch of 5; the filter passed positions 1 and 3 only
    assert filtered_batch_done([1, 3], 5, 2) == 5  # both passing records done: the whole batch
    assert filtered_batch_done([1, 3], 5, 1) == 3  # position 3 failed: 0-2 are done, retried from 3
    assert filtered_batch_done([1, 3], 5, 0) == 1  # position 1 failed: only the filtered-out 0
    assert filtered_batch_done([], 4, 0) == 4  # nothing passed: processed, no invocation


def test_a_stream_retries_from_the_checkpoint_then_discards_only_the_record_there() -> None:
    assert stream_after_failure(["b", "c"], 1, 10) == (["b", "c"], None, 1)  # first failure: retried
    assert stream_after_failure(["b", "c"], 10, 10) == (["b", "c"], None, 10)  # the 10th retry still comes
    assert stream_after_failure(["b", "c"], 11, 10) == (["c"], "b", 0)  # exhausted: "b" alone, "c" afresh
    assert stream_after_failure(["b"], 11, 10) == ([], "b", 0)
    assert stream_after_failure(["b"], 0, 0) == (["b"], None, 0)
    assert stream_after_failure(["b"], 1, 0) == ([], "b", 0)  # MaximumRetryAttempts 0: no retry
    assert stream_after_failure(["b"], 10_000, -1) == (["b"], None, 10_000)  # -1: until the record expires
    with pytest.raises(ValueError):
        stream_after_failure([], 1, 10)


def test_an_injected_crash_is_not_swallowed_by_a_handlers_except_exception() -> None:
    def handler() -> str:
        try:
            raise InjectedCrash("crash after sqs.SendMessageBatch")
        except Exception:  # what a per-record error handler catches
            return "handled"

    with pytest.raises(InjectedCrash):
        handler()


def test_a_rule_fires_in_its_one_shot_minute_only_while_enabled() -> None:
    expr = one_shot_cron(MINUTE_MS)
    assert armed_minute({"State": "ENABLED", "ScheduleExpression": expr}) == MINUTE_MS
    assert armed_minute({"State": "DISABLED", "ScheduleExpression": expr}) is None
    assert armed_minute({"State": "ENABLED"}) is None
    assert armed_minute({"State": "ENABLED", "ScheduleExpression": "rate(1 minute)"}) is None


def test_the_scheduled_event_names_the_rule_its_minute_and_a_stable_id() -> None:
    arn = "arn:aws:events:eu-west-1:111122223333:rule/punctual"
    event = scheduled_event(arn, MINUTE_MS, "firing-7")
    assert event["id"] == "firing-7"
    assert event["detail-type"] == "Scheduled Event" and event["source"] == "aws.events"
    assert (event["account"], event["region"], event["resources"]) == ("111122223333", "eu-west-1", [arn])
    assert event["time"] == "2027-01-01T00:00:00Z"


def test_async_retries_are_lambdas_two_after_one_and_two_minutes() -> None:
    assert ASYNC_RETRY_DELAYS_MS == (60_000, 120_000)
