"""Properties no test pinned before (issue 28): each test names the mutant it kills, a change that
survived the whole suite. Against moto, through the poll as production runs it."""

from __future__ import annotations

import json

import pytest

from punctual.core.config import Settings
from punctual.core.keys import encode_sk
from punctual.core.usecases.poll import poll
from tests.functional.helpers import SentLog, rule_state
from tests.support import T0_MS, pointers_of

MINUTE = 60_000


@pytest.fixture
def four_shards(frozen):
    from moto import mock_aws

    from tests.support import FreezegunClock, make_stack

    with mock_aws():
        yield make_stack(Settings(shards=4), clock=FreezegunClock(frozen))


def test_the_poll_arms_for_the_earliest_row_beyond_its_window_across_shards(four_shards):
    """Kills the mutant "merging shards out of order": store.across_partitions concatenating the
    partitions (itertools.chain) instead of heapq.merge by sk. The poll's _first_unsent_after takes
    the first unsent row after its window; in partition order that is the row due in a day (an
    earlier partition), and the row due in 20 minutes would be polled for a day late."""
    s = four_shards.settings
    soon, later = "order-42", "d"  # ids of shard #2 and shard #0 (crc32 % 4, the README's rule)
    assert (s.partition_for(soon), s.partition_for(later)) == ("scheduler#2", "scheduler#0")
    four_shards.put_raw(encode_sk(T0_MS + 24 * 60 * MINUTE, later), {"n": "later"})   # partition #0
    four_shards.put_raw(encode_sk(T0_MS + 20 * MINUTE, soon), {"n": "soon"})          # partition #2
    # a legacy row under the bare value (read first) due later still
    four_shards.ddb.put_item(TableName=s.table_name, Item={
        "pk": {"S": "scheduler"}, "sk": {"S": encode_sk(T0_MS + 48 * 60 * MINUTE, "legacy")},
        "payload": {"M": {}}})

    report = poll(four_shards.deps)  # at T0: the window (15 min) holds nothing

    assert report.sent == 0
    # the row due at 00:20:00 needs a poll by due - lead (300 s): the minute 00:15
    assert report.next_minute_ms == T0_MS + 15 * MINUTE
    assert rule_state(four_shards) == ("ENABLED", T0_MS + 15 * MINUTE)


def test_a_groups_delay_is_computed_from_its_first_row(stack):
    """Kills the mutant "a group's DelaySeconds from its last row": usecases/send.claim_and_send's
    delay_for using claimed[g[-1]] instead of claimed[g[0]] (the message would become visible after
    its first row is due: that row delivered ~1 s late). Pins the DelaySeconds SQS is sent."""
    first, last = T0_MS + 600_000, T0_MS + 600_900  # due within group_span_ms (1 s): one message
    stack.put_raw(encode_sk(first, "first"), {"n": "first"})
    stack.put_raw(encode_sk(last, "last"), {"n": "last"})
    log = SentLog(stack.sqs)

    report = poll(stack.deps)  # at T0 exactly (the frozen clock does not move)

    assert report.sent == 2
    [entry] = log.entries
    assert [p["sk"] for p in pointers_of(json.loads(entry["MessageBody"]))] == [
        encode_sk(first, "first"), encode_sk(last, "last")]
    # ceil((first - wake_early 1200 ms - group extra wake 2 ms - now) / 1000) = ceil(598.798) = 599;
    # from the last row it would be ceil(599.698) = 600
    assert entry["DelaySeconds"] == 599
