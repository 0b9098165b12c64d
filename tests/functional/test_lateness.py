"""``LatenessMs`` measures what Punctual controls (docs/construct.md, "Lateness"): from the later of a
task's due time and its write. A "run now" task put past due, or a redriven old row, is late by what
Punctual took to deliver it, not by its age (issue 42, item 4: one row due a year ago made the metric
218,850,094,417 ms and set off the p99 >= 1 s alarm). The delivered event's ``lateness_ms`` stays the
consumer's view: from the due time. In virtual time, both delivery modes."""

from __future__ import annotations

import pytest

from punctual.core.config import Settings
from punctual.core.keys import encode_sk
from punctual.core.metrics_names import LATENESS_MS
from punctual.core.models import ATTR_WRITTEN_MS
from tests.reliability.crashes import environment
from tests.unit.test_observability import values_of

T0 = 1_798_761_600_000  # 2027-01-01T00:00:00Z
YEAR_MS = 365 * 86_400_000


@pytest.mark.parametrize("delivery", ["consumer", "direct"])
def test_a_row_put_a_year_past_due_is_late_by_what_punctual_took_not_by_its_age(emf_records, delivery):
    # GIVEN a row put at T0 + 40 ms, due a year before: "run now"
    with environment("fake", Settings(send_workers=1, delivery=delivery), start_ms=T0 + 40) as (world, _):
        s = world.deps.settings
        due = T0 - YEAR_MS
        sk = encode_sk(due, "run-now")
        world.deps.ddb.put_item(TableName=s.table_name, Item={
            "pk": {"S": s.partition_for_key(sk)}, "sk": {"S": sk}, "payload": {"M": {}}})
        # WHEN the editor sends it at once and it is delivered (then the safety poll after it)
        world.settle(3_600_000)
        [event] = world.delivered
    # THEN it was delivered right away (virtual time: every AWS step takes 0 ms)
    assert event["delivered_at_ms"] == T0 + 40
    # and the consumer's view, the event's lateness_ms, still counts from the due time
    assert event["lateness_ms"] == YEAR_MS + 40
    # but LatenessMs counts from its write: its stream record's creation, rounded down to the second
    # (T0), so 40 ms, not a year (the alarm's p99 >= 1 s stays quiet)
    assert values_of(emf_records(), LATENESS_MS) == [40]


def test_a_row_written_late_keeps_its_write_time_through_a_resend(emf_records):
    """The editor's claim stores the write time on the row (``punctual_written_ms``), so whoever sends
    it later (the poll's orphan resend after a lost message) still measures from it."""
    with environment("fake", Settings(send_workers=1), start_ms=T0 + 40) as (world, _):
        s = world.deps.settings
        world.lose = {1}  # SQS loses the editor's pointer: the orphan check resends it
        due = T0 - YEAR_MS
        sk = encode_sk(due, "lost")
        world.deps.ddb.put_item(TableName=s.table_name, Item={
            "pk": {"S": s.partition_for_key(sk)}, "sk": {"S": sk}, "payload": {"M": {}}})
        world.run_for(1_000)
        row = world.deps.ddb.get_item(TableName=s.table_name, Key={
            "pk": {"S": s.partition_for_key(sk)}, "sk": {"S": sk}})["Item"]
        assert row[ATTR_WRITTEN_MS] == {"N": str(T0)}
        world.settle(3_600_000)
        [event] = world.delivered
    late = event["delivered_at_ms"] - T0
    assert late > s.orphan_grace_ms  # the resend waited out the orphan grace: lateness Punctual caused
    assert values_of(emf_records(), LATENESS_MS) == [late]
