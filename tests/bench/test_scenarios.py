"""The top-of-minute workload (issue 11): 80 % of the tasks due exactly on whole minutes, in
clusters of 1-5,000 on distinct minutes, the rest sparse; reproducible by seed."""

from __future__ import annotations

from collections import Counter

from punctual.bench.scenarios import MINUTE, NAMES, build, top_of_minute


def _clusters(dues: list[int]) -> Counter:
    return Counter(d for d in dues if d % MINUTE == 0)


def test_top_of_minute_at_the_issue_size_has_the_issue_shape():
    # GIVEN the issue's size
    sc = build("top-of-minute", seed=1, n=100_000)
    clusters = _clusters(sc.dues)

    # THEN 100,000 tasks over a day, 80 % of them on whole minutes, each cluster on its own minute
    assert sc.n == len(sc.inserts) == 100_000
    assert sum(clusters.values()) == 80_000
    assert len(clusters) == sc.params["clusters"]
    assert all(1 <= size <= 5_000 for size in clusters.values())
    assert max(clusters.values()) > 2_000 and min(clusters.values()) < 100  # spread, not one size
    dues = sorted(sc.dues)
    assert 23 * 3_600_000 <= dues[-1] - dues[0] <= 24 * 3_600_000


def test_top_of_minute_rows_are_inserted_ahead_of_due_mostly_before_the_window():
    sc = top_of_minute(seed=2, n=20_000)
    leads = [d - i for d, i in zip(sc.dues, sc.inserts, strict=True)]

    assert min(sc.inserts) >= 0
    assert min(leads) >= 1_000
    within_window = sum(1 for lead in leads if lead <= 15 * MINUTE) / sc.n
    assert 0.10 <= within_window <= 0.20  # the editor's fast path
    assert sum(1 for lead in leads if lead >= 20 * MINUTE) / sc.n >= 0.80  # the poller's path
    assert sc.horizon_ms > max(sc.dues)


def test_top_of_minute_is_reproducible_by_seed():
    a, b, c = top_of_minute(seed=7, n=5_000), top_of_minute(seed=7, n=5_000), top_of_minute(seed=8, n=5_000)
    assert (a.inserts, a.dues) == (b.inserts, b.dues)
    assert a.dues != c.dues


def test_top_of_minute_default_and_quick_sizes():
    full, quick = build("top-of-minute", seed=1), build("top-of-minute", seed=1, quick=True)
    assert "top-of-minute" in NAMES
    assert full.n == 20_000
    assert quick.n == 1_000
    assert sum(_clusters(quick.dues).values()) == 800
    assert len(_clusters(quick.dues)) > 1  # several clusters even at CI size
    assert max(quick.dues) - min(quick.dues) <= 2 * 3_600_000
    assert build("top-of-minute", seed=1, quick=True, n=2_000).n == 2_000
