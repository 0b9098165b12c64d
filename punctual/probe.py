"""``punctual probe``: how early or late SQS's delay timer makes a message visible (docs/probe.md).

The pure part: the plan (its sends, requests, price and duration), each sample's offsets, their
distribution per DelaySeconds, whether direct delivery's early margin covers what was measured, and
the JSON file. The queue, the sends and the receive loop are punctual/cli/probe.py's.

Two measures of each message, each on one clock only, so no clock skew enters either:
- ``server_ms``: ApproximateFirstReceiveTimestamp - (SentTimestamp + DelaySeconds), both SQS's
  (ReceiveMessage's ``MessageSystemAttributeNames``, epoch ms). It **decides**: it is the timer's
  own error, without the probe's network time.
- ``client_ms``: the local clock when the receive that returned the message returned - (the local
  clock right before its SendMessage + DelaySeconds): what a sender that counts DelaySeconds from
  its clock read before the call (direct delivery) sees, plus both calls' network time (never less
  than ``server_ms`` by more than the SQS hosts' clocks differ).
A first receive only says the message was visible by then: the receive loop runs continuously, and
the DelaySeconds-0 samples (visible once sent) measure how late it picks a message up (the
resolution).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from punctual.bench.prices import SQS_REQUEST
from punctual.core.config import MAX_DELAY_SECONDS
from punctual.stats import percentile

DEFAULT_DELAYS = (0, 1, 2, 5, 15, 60, 300, 900)
QUEUE_PREFIX = "punctual-probe-"
FORMAT = "punctual-probe/1"
DECIDES = "server"  # the measure the verdict and the table use
# The sends are this far apart: not a divisor of 1,000, so their phases within the second spread
# over it (a timer that rounds to whole seconds shows as a spread, not as one constant offset).
SPACING_MS = 137
# How long after its DelaySeconds a message is still waited for before it counts as missing.
TIMEOUT_S = 30


@dataclass(frozen=True)
class ProbePlan:
    delays: tuple[int, ...] = DEFAULT_DELAYS
    samples: int = 5  # messages per delay
    wait_s: int = 1  # each receive's WaitTimeSeconds (0: short polling)
    interval_ms: int = 50  # at least this long between two receives' starts
    spacing_ms: int = SPACING_MS
    timeout_s: int = TIMEOUT_S

    def __post_init__(self) -> None:
        if not self.delays or any(not 0 <= d <= MAX_DELAY_SECONDS for d in self.delays):
            raise ValueError(f"delays must be 0..{MAX_DELAY_SECONDS} seconds, got {list(self.delays)}")
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1, got {self.samples}")
        if not 0 <= self.wait_s <= 20:
            raise ValueError(f"wait must be 0..20 seconds (WaitTimeSeconds), got {self.wait_s}")
        if self.interval_ms < 0 or self.spacing_ms < 0 or self.timeout_s < 0:
            raise ValueError("interval, spacing and timeout must be >= 0")
        if self.cycle_ms < 1:
            raise ValueError("with --wait 0, the interval must be at least 1 ms")

    @property
    def cycle_ms(self) -> int:
        """The shortest time between two receives' starts that return no message."""
        return max(self.interval_ms, self.wait_s * 1000)

    def sends(self) -> list[tuple[int, int]]:
        """(ms after the first send, DelaySeconds) of each message, in send order: ``samples`` rounds,
        each of every delay, the longest first; ``spacing_ms`` apart."""
        order = sorted(set(self.delays), reverse=True)
        return [(k * self.spacing_ms, d) for k, d in enumerate(d for _ in range(self.samples) for d in order)]

    def duration_ms(self) -> int:
        """The longest the probe runs: its last message's DelaySeconds end, plus ``timeout_s``."""
        return max(at + d * 1000 for at, d in self.sends()) + self.timeout_s * 1000

    def requests(self) -> dict[str, int]:
        """The requests it makes at most: one receive per cycle while it runs, one more per message
        (a receive that returns a message returns early); the messages are not deleted one by one
        (DeleteQueue takes them)."""
        messages = len(self.sends())
        receives = -(-self.duration_ms() // self.cycle_ms) + messages
        return {"CreateQueue": 1, "SendMessage": messages, "ReceiveMessage": receives, "DeleteQueue": 1}

    def price_usd(self) -> float:
        """SQS standard's price of those requests (each message under 64 KiB: one request each)."""
        return sum(self.requests().values()) * SQS_REQUEST


@dataclass
class Sample:
    delay_s: int
    send_start_ms: int | None = None  # the local clock right before its SendMessage
    send_end_ms: int | None = None  # ... right after it returned
    sent_ms: int | None = None  # SentTimestamp (SQS's clock)
    first_receive_ms: int | None = None  # ApproximateFirstReceiveTimestamp (SQS's clock)
    received_ms: int | None = None  # the local clock when the receive that returned it returned

    @property
    def server_ms(self) -> int | None:
        if self.first_receive_ms is None or self.sent_ms is None:
            return None
        return self.first_receive_ms - (self.sent_ms + self.delay_s * 1000)

    @property
    def client_ms(self) -> int | None:
        if self.received_ms is None or self.send_start_ms is None:
            return None
        return self.received_ms - (self.send_start_ms + self.delay_s * 1000)

    @property
    def clock_offset_ms(self) -> int | None:
        """SQS's clock minus the local one, from the send: SentTimestamp against the middle of the
        call (within half its round trip)."""
        if self.sent_ms is None or self.send_start_ms is None or self.send_end_ms is None:
            return None
        return self.sent_ms - (self.send_start_ms + self.send_end_ms) // 2

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "server_ms": self.server_ms, "client_ms": self.client_ms,
                "clock_offset_ms": self.clock_offset_ms}


@dataclass(frozen=True)
class Distribution:
    """Offsets of first receives from their delay's end, ms (negative: early)."""

    count: int
    missing: int = 0  # sent, never received (or not measured)
    min: int | None = None
    p1: int | None = None
    p50: int | None = None
    p99: int | None = None
    max: int | None = None
    early: int = 0  # first received before the delay ended
    worst_early_ms: int = 0  # the most any was early (0: none)


def distribution(offsets: list[int | None]) -> Distribution:
    got = sorted(v for v in offsets if v is not None)
    if not got:
        return Distribution(count=0, missing=len(offsets))
    early = [v for v in got if v < 0]
    return Distribution(count=len(got), missing=len(offsets) - len(got), min=got[0], p1=percentile(got, 1),
                        p50=percentile(got, 50), p99=percentile(got, 99), max=got[-1], early=len(early),
                        worst_early_ms=-got[0] if early else 0)


def by_delay(samples: list[Sample]) -> dict[int, dict[str, Distribution]]:
    """Each delay's distribution of both measures, shortest delay first."""
    out: dict[int, dict[str, Distribution]] = {}
    for delay in sorted({s.delay_s for s in samples}):
        mine = [s for s in samples if s.delay_s == delay]
        out[delay] = {"server": distribution([s.server_ms for s in mine]),
                      "client": distribution([s.client_ms for s in mine])}
    return out


def pickup_ms(samples: list[Sample]) -> int | None:
    """The resolution: p99 of the DelaySeconds-0 samples' ``server_ms`` (how long after a message is
    visible the loop first receives it); None without such samples."""
    return percentile([s.server_ms for s in samples if s.delay_s == 0 and s.server_ms is not None], 99)


@dataclass(frozen=True)
class MarginVerdict:
    margin_ms: int
    worst_early_ms: int  # the most a first receive came before its delay's end (DelaySeconds >= 1)
    # the most a message may have been visible before its delay's end, given the resolution: a sample
    # first received ``server_ms`` after it was visible up to ``pickup_ms`` after becoming so
    bound_ms: int
    pickup_ms: int | None
    measured: int  # samples with DelaySeconds >= 1 and both timestamps

    @property
    def covers(self) -> bool:
        return self.measured > 0 and self.margin_ms >= self.bound_ms

    def line(self) -> str:
        if not self.measured:
            return (f"direct delivery's early margin ({self.margin_ms} ms): nothing measured "
                    "(no sample with DelaySeconds >= 1 was received)")
        verdict = "covers" if self.covers else "does NOT cover"
        resolution = (f"at the loop's pick-up p99 of {self.pickup_ms} ms (DelaySeconds 0)" if self.pickup_ms is not None
                      else "with the resolution unknown (probe DelaySeconds 0 too)")
        return (f"direct delivery's early margin ({self.margin_ms} ms) {verdict} the measured early tail: worst first "
                f"receive {self.worst_early_ms} ms before its delay's end; {resolution}, a message may have been "
                f"visible up to {self.bound_ms} ms before it")


def margin_verdict(margin_ms: int, samples: list[Sample]) -> MarginVerdict:
    """Whether ``margin_ms`` (Settings.direct_early_margin_ms) covers the early tail measured on the
    samples with a timer (DelaySeconds >= 1), on the deciding measure (``server_ms``)."""
    timed = [s.server_ms for s in samples if s.delay_s > 0 and s.server_ms is not None]
    pickup = pickup_ms(samples)
    worst = max([0] + [-v for v in timed])
    bound = max([0] + [(pickup or 0) - v for v in timed])
    return MarginVerdict(margin_ms, worst, bound, pickup, len(timed))


@dataclass
class ProbeRun:
    """What a probe did: its plan, where, its samples, and what went wrong on the way."""

    plan: ProbePlan
    endpoint: str  # the endpoint URL, or "AWS"
    region: str
    queue: str = ""
    started_ms: int = 0
    ended_ms: int = 0
    samples: list[Sample] = field(default_factory=list)
    receive_errors: int = 0
    receive_cycle_ms: list[int] = field(default_factory=list)  # between consecutive receives' starts


def report(run: ProbeRun, margin_ms: int) -> dict[str, Any]:
    """The JSON file's content (docs/probe.md, "The file")."""
    plan, verdict = run.plan, margin_verdict(margin_ms, run.samples)
    offsets = [s.clock_offset_ms for s in run.samples if s.clock_offset_ms is not None]
    return {
        "format": FORMAT,
        "endpoint": run.endpoint,
        "region": run.region,
        "queue": run.queue,
        "started_ms": run.started_ms,
        "ended_ms": run.ended_ms,
        "plan": {**asdict(plan), "delays": sorted(set(plan.delays)), "requests": plan.requests(),
                 "price_usd": plan.price_usd()},
        "decides": DECIDES,
        "resolution": {"pickup_p99_ms": pickup_ms(run.samples),
                       "receive_cycle_p50_ms": percentile(run.receive_cycle_ms, 50),
                       "receive_cycle_max_ms": max(run.receive_cycle_ms, default=None),
                       "receive_errors": run.receive_errors},
        "clock_offset_ms": {"p50": percentile(offsets, 50), "min": min(offsets, default=None),
                            "max": max(offsets, default=None)},
        "by_delay": {str(d): {k: asdict(v) for k, v in m.items()} for d, m in by_delay(run.samples).items()},
        "margin": {**asdict(verdict), "covers": verdict.covers},
        "samples": [s.to_json() for s in run.samples],
    }


def plan_lines(plan: ProbePlan, where: str, queue: str) -> list[str]:
    """What the probe will do, its requests, price and duration: printed before it starts."""
    req = plan.requests()
    total = sum(req.values())
    calls = ", ".join(f"{name} {count:,}" for name, count in req.items())
    longest = max(plan.delays)
    return [
        f"punctual probe: the SQS delay timer, on a temporary queue {queue} ({where})",
        f"  DelaySeconds {', '.join(map(str, sorted(set(plan.delays))))} x {plan.samples} samples = "
        f"{req['SendMessage']} messages, one SendMessage each, {plan.spacing_ms} ms apart",
        f"  at most {total:,} requests ({calls}): ${plan.price_usd():.4f} at SQS standard's $0.40 per million "
        "(punctual/bench/prices.py SQS_REQUEST)",
        f"  takes at most {_duration(plan.duration_ms())} (the longest delay {longest} s, the sends, and "
        f"{plan.timeout_s} s for a late message); Ctrl-C deletes the queue",
    ]


def _duration(ms: int) -> str:
    s = -(-ms // 1000)
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def summary_lines(run: ProbeRun, margin_ms: int) -> list[str]:
    """The table (the deciding measure, and the local one's p50 / p99) and the verdicts."""
    head = ("| DelaySeconds | received | missing | min | p1 | p50 | p99 | max | early | worst early | "
            "local p50 / p99 |")
    lines = ["First receive - (SentTimestamp + DelaySeconds), SQS's clock, ms (negative: early):", head,
             "|" + "---|" * 11]
    for delay, m in by_delay(run.samples).items():
        d, c = m["server"], m["client"]
        lines.append(f"| {delay} | {d.count} | {d.missing} | {_v(d.min)} | {_v(d.p1)} | {_v(d.p50)} | {_v(d.p99)} | "
                     f"{_v(d.max)} | {d.early} | {d.worst_early_ms} | {_v(c.p50)} / {_v(c.p99)} |")
    rep = report(run, margin_ms)
    res, skew = rep["resolution"], rep["clock_offset_ms"]
    lines.append(f"resolution: the loop picks a visible message up within {_v(res['pickup_p99_ms'])} ms (p99, "
                 f"DelaySeconds 0); receives {_v(res['receive_cycle_p50_ms'])} ms apart (p50), "
                 f"{res['receive_errors']} failed")
    lines.append(f"clocks: SQS's minus this machine's {_v(skew['p50'])} ms (p50, {_v(skew['min'])}..{_v(skew['max'])});"
                 " neither measure mixes them (the local column counts both calls' network time)")
    lines.append(margin_verdict(margin_ms, run.samples).line())
    return lines


def _v(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
