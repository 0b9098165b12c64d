"""Nearest-rank percentiles, for the figures the CLI prints (``punctual demo``, ``punctual probe``)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[int], p: float) -> int | None:
    """The nearest-rank ``p``-th percentile of ``values`` (None when empty): the smallest value with at
    least ``p`` % of them at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(round(p * len(ordered) / 100, 9))  # rounded first: 0.07 x 100 is 7.000000000000001
    return ordered[max(0, min(len(ordered), rank) - 1)]
