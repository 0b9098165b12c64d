"""Pure classification of DynamoDB stream records (punctual.core.stream)."""

from __future__ import annotations

import pytest

from punctual.core import stream
from punctual.core.config import META_PK, Settings
from punctual.core.cron import MINUTE_MS, minute_not_after, minute_not_before
from punctual.core.models import ATTR_ATTEMPT, ATTR_ENQUEUED_MS
from punctual.core.stream import RecordAction, classify_record, plan_stream_batch

NOW = 1_798_761_600_000  # 2027-01-01T00:00:00Z
S = Settings()


def image(sk: str, pk: str = "scheduler", payload: dict | None = None, **extra) -> dict:
    item = {"pk": {"S": pk}, "sk": {"S": sk}, "payload": {"M": payload or {"a": {"S": "1"}}}}
    item.update(extra)
    return item


def record(name: str, new: dict | None = None, old: dict | None = None, seq: str = "100") -> dict:
    src = new or old or {}
    data = {"Keys": {"pk": src.get("pk"), "sk": src.get("sk")}, "SequenceNumber": seq,
            "StreamViewType": "NEW_AND_OLD_IMAGES"}
    if new is not None:
        data["NewImage"] = new
    if old is not None:
        data["OldImage"] = old
    return {"eventName": name, "eventSource": "aws:dynamodb", "dynamodb": data}


def sk(due_ms: int, id: str = "t") -> str:
    return f"{due_ms:013d}#{id}"


def test_remove_is_ignored():
    c = classify_record(record("REMOVE", old=image(sk(NOW))), S, NOW)
    assert c.action is RecordAction.IGNORE and c.sequence_number == "100"


def test_meta_partition_is_ignored():
    meta = {"pk": {"S": META_PK}, "sk": {"S": "rule"}, "armed_ms": {"N": "1"}, "version": {"N": "3"}}
    assert classify_record(record("INSERT", meta), S, NOW).action is RecordAction.IGNORE
    assert classify_record(record("MODIFY", meta, meta), S, NOW).action is RecordAction.IGNORE


def test_our_claim_modify_is_ignored():
    old = image(sk(NOW + 5000))
    new = image(sk(NOW + 5000), **{ATTR_ENQUEUED_MS: {"N": str(NOW)}, ATTR_ATTEMPT: {"N": "1"}})
    c = classify_record(record("MODIFY", new, old), S, NOW)
    assert c.action is RecordAction.IGNORE and c.note == "in flight"


def test_released_claim_is_ignored():
    old = image(sk(NOW + 5000), **{ATTR_ENQUEUED_MS: {"N": str(NOW)}, ATTR_ATTEMPT: {"N": "1"}})
    new = image(sk(NOW + 5000), **{ATTR_ATTEMPT: {"N": "1"}})
    assert classify_record(record("MODIFY", new, old), S, NOW).note == "claim released"


def test_a_put_over_an_in_flight_row_is_a_new_task():
    """A user's put over a row that was sent (no Punctual bookkeeping in the new image) is a new task:
    sent or armed like an insert, not taken for a released claim and left to nobody (issue 28).
    Mutant: the release rule without ``ATTR_ATTEMPT in item``."""
    old = image(sk(NOW + 5000), **{ATTR_ENQUEUED_MS: {"N": str(NOW)}, ATTR_ATTEMPT: {"N": "1"}})
    new = image(sk(NOW + 5000), payload={"v": {"S": "new"}})
    c = classify_record(record("MODIFY", new, old), S, NOW)
    assert c.action is RecordAction.SEND_NOW and c.task is not None and c.task.payload == {"v": "new"}


def test_a_row_whose_sends_are_used_up_is_rejected_by_the_editor_as_by_the_poller():
    """One rule for the editor and the poller (planning.row_state): an unsent row at max_attempts is
    undeliverable; the editor used to claim and send it (22 attempts seen, issue 28)."""
    new = image(sk(NOW + 5000), **{ATTR_ATTEMPT: {"N": str(S.max_attempts)}})
    c = classify_record(record("INSERT", new), S, NOW)
    assert c.action is RecordAction.REJECT and c.rejection is not None
    assert (c.rejection.code, c.rejection.reason) == ("undeliverable", f"still pending after {S.max_attempts} sends")
    below = image(sk(NOW + 5000), **{ATTR_ATTEMPT: {"N": str(S.max_attempts - 1)}})
    assert classify_record(record("INSERT", below), S, NOW).action is RecordAction.SEND_NOW


def test_user_modify_of_unsent_row_is_classified_again():
    old = image(sk(NOW + 5000))
    new = image(sk(NOW + 5000), payload={"b": {"N": "2"}})
    c = classify_record(record("MODIFY", new, old), S, NOW)
    assert c.action is RecordAction.SEND_NOW and c.task.payload == {"b": 2}


WHOLE_WINDOW = Settings(fast_path_seconds=900)  # the default: the editor sends all due within the window


@pytest.mark.parametrize("due", [NOW - 3_600_000, NOW, NOW + 300, NOW + 5000, NOW + S.window_ms])
def test_with_a_window_wide_fast_path_due_within_window_or_past_is_sent_now(due):
    c = classify_record(record("INSERT", image(sk(due))), WHOLE_WINDOW, NOW)
    assert c.action is RecordAction.SEND_NOW and c.task.due_ms == due


@pytest.mark.parametrize("due", [NOW + S.window_ms + 1, NOW + 3 * 86_400_000])
def test_due_after_window_arms_later(due):
    for s in (S, WHOLE_WINDOW):
        assert classify_record(record("INSERT", image(sk(due))), s, NOW).action is RecordAction.ARM_LATER


@pytest.mark.parametrize(
    "new, code",
    [
        (image("1798761605#t"), "seconds_not_ms"),
        (image("2027-01-01T00:00:05Z#t"), "iso_string"),
        (image(f"{NOW:013d}#"), "missing_id"),
        (image(f"{NOW:013d}"), "missing_id"),
        (image(sk(7_258_118_400_000)), "year_out_of_range"),
        (image(sk(NOW), pk="other"), "wrong_pk"),
        ({"pk": {"S": "scheduler"}, "sk": {"S": sk(NOW)}}, "missing_payload"),
        ({"pk": {"S": "scheduler"}, "sk": {"S": sk(NOW)}, "payload": {"S": "x"}}, "payload_not_map"),
    ],
)
def test_malformed_rows_are_rejected_with_their_code(new, code):
    c = classify_record(record("INSERT", new), S, NOW)
    assert c.action is RecordAction.REJECT and c.rejection.code == code and c.item == new


def test_unexpected_parse_error_is_the_rows_problem(monkeypatch):
    def boom(item, partition):
        raise TypeError("weird")

    monkeypatch.setattr(stream, "task_from_item", boom)
    c = classify_record(record("INSERT", image(sk(NOW))), S, NOW)
    assert c.action is RecordAction.REJECT and c.rejection.code == "malformed"


@pytest.mark.parametrize("rec", [None, "x", {}, {"eventName": "INSERT"}, {"eventName": "FOO", "dynamodb": {}}])
def test_garbage_records_never_raise(rec):
    assert classify_record(rec, S, NOW).action is RecordAction.IGNORE


def test_record_without_new_image_is_ignored():
    rec = record("INSERT", image(sk(NOW)))
    del rec["dynamodb"]["NewImage"]
    assert classify_record(rec, S, NOW).action is RecordAction.IGNORE


def test_plan_arms_the_earliest_need():
    late = NOW + 3 * 86_400_000
    soon = NOW + 5000
    plan = plan_stream_batch([record("INSERT", image(sk(late, "a")), seq="1"),
                       record("INSERT", image(sk(soon, "b")), seq="2"),
                       record("REMOVE", old=image(sk(NOW)), seq="3")], S, NOW)
    orphan_check = minute_not_before(soon + S.orphan_grace_ms, NOW)
    assert plan.arm_minute_ms == orphan_check
    assert [t.sk for t in plan.send_now] == [sk(soon, "b")]
    assert [c.sequence_number for c in plan.arming_records] == ["1", "2"]

    only_late = plan_stream_batch([record("INSERT", image(sk(late)))], S, NOW)
    assert only_late.arm_minute_ms == minute_not_after(late - S.lead_ms, NOW)
    assert only_late.arm_minute_ms % MINUTE_MS == 0 and only_late.arm_minute_ms <= late - S.lead_ms


def test_plan_without_valid_rows_arms_nothing():
    plan = plan_stream_batch([record("REMOVE", old=image(sk(NOW))), record("INSERT", image("bad"))], S, NOW)
    assert plan.arm_minute_ms is None and plan.send_now == []


def test_past_due_row_arms_a_future_minute():
    plan = plan_stream_batch([record("INSERT", image(sk(NOW - 3_600_000)))], S, NOW + 1)
    assert plan.arm_minute_ms > NOW + 1


def test_duplicate_rows_in_a_batch_are_sent_once():
    r = record("INSERT", image(sk(NOW + 5000)), seq="1")
    m = record("MODIFY", image(sk(NOW + 5000), payload={"z": {"S": "2"}}), image(sk(NOW + 5000)), seq="2")
    assert len(plan_stream_batch([r, m], S, NOW).send_now) == 1


# -- fast_path_seconds: what the editor sends itself, and what it leaves to a poll ------------------

NO_FAST_PATH = Settings(fast_path_seconds=0)


def test_the_default_fast_path_is_the_window():
    assert Settings().fast_path_ms == Settings().window_ms


@pytest.mark.parametrize("due", [NOW - 1, NOW + 5_000, NOW + 60_000, NOW + 359_999])
def test_without_a_fast_path_the_editor_still_sends_what_no_poll_can_reach(due):
    # the earliest minute safe to arm begins at 00:01 (now + 10 s rounded up); a poll must start
    # by due - lead (300 s): rows due before 00:06 cannot wait for one
    assert not stream.poll_can_take(due, NOW, NO_FAST_PATH.lead_ms)
    assert classify_record(record("INSERT", image(sk(due))), NO_FAST_PATH, NOW).action is RecordAction.SEND_NOW


@pytest.mark.parametrize("due", [NOW + 360_000, NOW + 480_000, NOW + NO_FAST_PATH.window_ms])
def test_without_a_fast_path_rows_a_poll_can_reach_are_left_to_it(due):
    c = classify_record(record("INSERT", image(sk(due))), NO_FAST_PATH, NOW)
    assert c.action is RecordAction.ARM_LATER
    minute = stream.later_arm_minute(c.task, NO_FAST_PATH, NOW)
    assert NOW + 10_000 < minute <= due - NO_FAST_PATH.lead_ms  # safe to arm, and early enough


def test_the_fast_path_never_exceeds_the_window():
    s = Settings(window_seconds=600, lead_seconds=120, fast_path_seconds=900)
    assert s.fast_path_ms == 600_000  # capped by the window
    assert classify_record(record("INSERT", image(sk(NOW + 600_001))), s, NOW).action is RecordAction.ARM_LATER
    with pytest.raises(ValueError, match="fast_path_seconds"):
        Settings(fast_path_seconds=-1)
