"""The delivered event's id: a golden value, so a change of what it hashes cannot pass unseen."""

from __future__ import annotations

from punctual.core.models import event_id

# computed once from the code (and shown in the README's delivered event): uuid5 of "pk\x00sk"
GOLDEN = "f2ada993-134e-585e-a7f7-c1aed7535a57"


def test_event_id_has_a_golden_value_and_depends_on_the_partition():
    """Kills the mutant "event_id without the pk" (models.event_id hashing only the sk): a row of
    another partition (a shard) with the same sk must get another id, and the id of ("scheduler",
    "1798135200000#order-42") is the one consumers stored before: it must never change (issue 28)."""
    assert event_id("scheduler", "1798135200000#order-42") == GOLDEN
    assert event_id("scheduler#2", "1798135200000#order-42") != GOLDEN
    assert event_id("scheduler", "1798135200000#order-43") != GOLDEN
