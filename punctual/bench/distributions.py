"""The distributions the simulator draws latencies from (ms): a model parameter is one of these.

- :class:`Fixed`: one value, no draw.
- :class:`Uniform`: ``(lo, hi)`` whole ms, drawn as ``rng.randint(lo, hi)`` (the bench's ranges before issue 40:
  a run with the old ranges draws the same numbers as before).
- :class:`LogNormal`: a shifted log-normal, ``shift + exp(mu + sigma * z)``: a long tail, no cap unless one
  is stated (a physical bound, e.g. Lambda's 10 s INIT limit). :func:`fit_lognormal` fits it to quantiles.
- :class:`Empirical`: measured quantiles (``calibrate`` writes these), interpolated between the points in
  (normal score, log ms) space; past the highest point the last segment's slope carries on (a log-normal
  tail, no cap) unless the points end at p = 1; below the lowest, the lowest value.
- :class:`Samples`: measured values, one drawn at a time (a bootstrap: its tail ends at the largest).

Every one answers ``quantile(p)`` and draws with ``sample(rng)`` (inverse CDF on ``rng.random()``, except
Uniform). Pure: no I/O.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from statistics import NormalDist

_NORMAL = NormalDist()
_P_MIN = 1e-12  # a draw of exactly 0 would be the distribution's -infinity


def _score(p: float) -> float:
    return _NORMAL.inv_cdf(min(max(p, _P_MIN), 1 - _P_MIN))


def _ms(x: float) -> int:
    return max(0, int(round(x)))


@dataclass(frozen=True)
class Fixed:
    value: int

    def sample(self, rng: random.Random) -> int:
        return self.value

    def quantile(self, p: float) -> float:
        return float(self.value)

    def describe(self) -> str:
        return f"{self.value:,} ms"


@dataclass(frozen=True)
class Uniform:
    lo: int
    hi: int

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.lo, self.hi)

    def quantile(self, p: float) -> float:
        return self.lo + p * (self.hi - self.lo)

    def describe(self) -> str:
        return f"uniform {self.lo:,}-{self.hi:,} ms"


@dataclass(frozen=True)
class LogNormal:
    shift: float
    mu: float
    sigma: float
    cap: int | None = None  # a physical bound, stated where used (None: no cap)

    def quantile(self, p: float) -> float:
        x = self.shift + math.exp(self.mu + self.sigma * _score(p))
        return x if self.cap is None else min(x, float(self.cap))

    def sample(self, rng: random.Random) -> int:
        return _ms(self.quantile(rng.random()))

    def describe(self) -> str:
        q = ", ".join(f"p{_pct(p)} {self.quantile(p):,.0f}" for p in (0.5, 0.9, 0.99, 0.999))
        cap = f", capped at {self.cap:,} ms" if self.cap is not None else ", no cap"
        return (f"shifted log-normal (shift {self.shift:.1f} ms, mu {self.mu:.4f}, sigma {self.sigma:.4f}): "
                f"{q} ms{cap}")


@dataclass(frozen=True)
class Empirical:
    points: tuple[tuple[float, float], ...]  # (probability, ms), probabilities rising, values not falling

    def quantile(self, p: float) -> float:
        pts = self.points
        if p <= pts[0][0] or len(pts) == 1:
            return pts[0][1] if p <= pts[0][0] else pts[-1][1]
        for (p0, x0), (p1, x1) in zip(pts, pts[1:], strict=False):
            if p <= p1:
                return _between(p, p0, x0, p1, x1)
        if pts[-1][0] >= 1:
            return pts[-1][1]
        (p0, x0), (p1, x1) = pts[-2], pts[-1]
        return _between(p, p0, x0, p1, x1)  # past the last point: its segment's slope carries on

    def sample(self, rng: random.Random) -> int:
        return _ms(self.quantile(rng.random()))

    def describe(self) -> str:
        tail = "" if self.points[-1][0] >= 1 else ", log-normal tail past the last point"
        return "measured quantiles " + ", ".join(f"p{_pct(p)} {x:,.0f}" for p, x in self.points) + f" ms{tail}"


def _between(p: float, p0: float, x0: float, p1: float, x1: float) -> float:
    """Interpolate (or, past ``p1``, extrapolate) between two quantiles: linear in (normal score, log ms)
    when both values are positive and neither probability is 0 or 1, else linear in (p, ms)."""
    if x0 <= 0 or x1 <= 0 or p0 <= 0 or p1 >= 1 or x1 == x0:
        return x0 + (x1 - x0) * (p - p0) / (p1 - p0) if p <= p1 else x1
    z0, z1, z = _score(p0), _score(p1), _score(p)
    return math.exp(math.log(x0) + (math.log(x1) - math.log(x0)) * (z - z0) / (z1 - z0))


@dataclass(frozen=True)
class Samples:
    values: tuple[int, ...]

    def sample(self, rng: random.Random) -> int:
        return self.values[int(rng.random() * len(self.values))]

    def quantile(self, p: float) -> float:
        ordered = sorted(self.values)
        return float(ordered[min(len(ordered) - 1, int(p * len(ordered)))])

    def describe(self) -> str:
        q = ", ".join(f"p{_pct(p)} {self.quantile(p):,.0f}" for p in (0.5, 0.9, 0.99))
        return f"{len(self.values):,} measured samples ({q}, max {max(self.values):,} ms)"


Dist = Fixed | Uniform | LogNormal | Empirical | Samples


def _pct(p: float) -> str:
    return f"{p * 100:g}"


@dataclass(frozen=True)
class Fit:
    """A shifted log-normal fitted to quantiles, and its residuals at them: (probability, given, fitted) ms."""

    dist: LogNormal
    residuals: tuple[tuple[float, float, float], ...]

    def describe(self) -> str:
        return "; ".join(f"p{_pct(p)} {given:g} -> {fitted:.1f} ms ({(fitted - given) / given:+.1%})"
                         for p, given, fitted in self.residuals)


def fit_lognormal(quantiles: dict[float, float], cap: int | None = None, shift_steps: int = 2_000) -> Fit:
    """The shifted log-normal closest to ``quantiles`` (probability -> ms) in log space: for each shift
    in [0, the smallest value) on a grid of ``shift_steps``, ``log(x - shift)`` against the normal scores
    is a straight line (least squares: mu, sigma); the shift with the least squared log error wins. Two
    quantiles fix mu and sigma exactly with no shift (the shift is then 0)."""
    if len(quantiles) < 2:
        raise ValueError("a log-normal needs at least 2 quantiles")
    pts = sorted(quantiles.items())
    if any(not 0 < p < 1 for p, _ in pts) or any(x <= 0 for _, x in pts):
        raise ValueError("quantiles need probabilities in (0, 1) and values above 0")
    if any(b <= a for (_, a), (_, b) in zip(pts, pts[1:], strict=False)):
        raise ValueError("quantile values must rise with their probabilities")
    zs = [_score(p) for p, _ in pts]
    shifts = [0.0] if len(pts) == 2 else [min(x for _, x in pts) * i / shift_steps for i in range(shift_steps)]
    best: tuple[float, LogNormal] | None = None
    for shift in shifts:
        ys = [math.log(x - shift) for _, x in pts]
        zm, ym = sum(zs) / len(zs), sum(ys) / len(ys)
        sigma = sum((z - zm) * (y - ym) for z, y in zip(zs, ys, strict=False)) / sum((z - zm) ** 2 for z in zs)
        dist = LogNormal(shift, ym - sigma * zm, sigma, cap)
        error = sum((math.log(dist.quantile(p)) - math.log(x)) ** 2 for p, x in pts)
        if best is None or error < best[0]:
            best = (error, dist)
    assert best is not None
    dist = best[1]
    return Fit(dist, tuple((p, x, dist.quantile(p)) for p, x in pts))
