"""Numbers, the markdown table and the plots of a benchmark run."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import prices as P
from .billing import IDLE_RECEIVE_API, fixed_total, platform_log_bytes
from .punctual_sim import EVENTS_THROTTLED_PREFIX, MEMORY_MB, THROTTLED_PREFIX, RunResult

DAY_MS = 86_400_000
BILLED_SERVICES = ("dynamodb", "sqs")


@dataclass
class Summary:
    strategy: str
    scenario: str
    n: int
    delivered: int
    lost: int
    early: int
    duplicates: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    invocations: int
    idle_per_day: float
    requests_per_task: float
    by_api: dict[str, float]
    usd_per_million: float
    cost_parts: dict[str, float]
    wall_s: float
    # The reading the run used (models.READINGS: "public", "pessimistic", "early"; "on-time" for
    # `--sqs-model on-time`), and the SQS delay-timer model in it: "on-time" (documented) or "early".
    reading: str = "public"
    sqs_model: str = "on-time"
    # DynamoDB requests refused over a partition's limit (all actors, the producer's puts included)
    # and the producer's puts refused at least once; None when the run does not model the limits.
    throttled_requests: int | None = None
    throttled_user_puts: int | None = None
    # EventBridge control-plane calls refused over the account's quota (punctual.bench.control_plane).
    events_throttled: int = 0
    # The deployment's fixed monthly cost (USD), apart from the price per million tasks, by part (a part in
    # parentheses is not in the total; billing.fixed_monthly); None for the alternatives' models.
    fixed_usd_month: float | None = None
    fixed_parts: dict[str, float] = field(default_factory=dict)
    # Several seeds (combine_seeds): the seeds, each figure's (min, max) over them (the figures above are
    # their medians), and each seed's figures (strategy_figures).
    seeds: list[int] = field(default_factory=list)
    spread: dict[str, list[float]] = field(default_factory=dict)
    per_seed: list[dict[str, Any]] = field(default_factory=list)


def _pct(values: list[int], q: float) -> float | None:
    if not values:
        return None
    k = min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))
    return float(values[k])


def lateness(r: RunResult) -> list[int]:
    return sorted(min(v) - r.dues[i] for i, v in r.deliveries.items() if v)


def summarize(r: RunResult) -> Summary:
    late = lateness(r)
    early = sum(1 for i, v in r.deliveries.items() if v and min(v) < r.dues[i])
    dups = sum(len(v) - 1 for v in r.deliveries.values())
    days = max(r.horizon_ms / DAY_MS, 1 / 24)
    # Idle: a scheduled or queue-driven invocation that had nothing to send (the editor and
    # cdk-scheduler's stream handler run because a row was written: never idle).
    idle = sum(1 for inv in r.invocations if inv.sent == 0 and inv.fn in ("poller", "consumer", "cdk-extract"))
    billed: Counter = Counter()
    for (actor, api), count in r.requests.items():
        # the idle receives are a fixed monthly cost (billing.fixed_monthly), not a task's
        if actor == "user" or api.startswith(("dynamodbstreams", "lambda.")) or api == IDLE_RECEIVE_API:
            continue
        billed[api] += count
    n = max(r.n, 1)
    sqs_requests = sum(c for api, c in billed.items() if api.startswith("sqs."))
    sns_requests = sum(c for api, c in billed.items() if api.startswith("sns."))  # Publish; deliveries to Lambda free
    gb_s = 0.0
    by_fn: defaultdict[str, float] = defaultdict(float)  # USD, not a count
    for inv in r.invocations:
        mem = inv.memory_mb or MEMORY_MB.get(inv.fn, 128)
        g = max(1, inv.duration_ms) / 1000 * mem / 1024
        gb_s += g
        by_fn[inv.fn] += g * P.LAMBDA_GB_S_ARM64 + P.LAMBDA_REQUEST
    platform_logs = sum(platform_log_bytes(inv.memory_mb or MEMORY_MB.get(inv.fn, 128), inv.duration_ms, inv.cold)
                        for inv in r.invocations)  # Lambda's START / END / REPORT lines
    parts = {
        "DynamoDB": r.ddb_wru * P.DDB_WRU + r.ddb_rru * P.DDB_RRU,
        "SQS": sqs_requests * P.SQS_REQUEST,
        "SNS": sns_requests * P.SNS_PUBLISH,
        "Lambda": len(r.invocations) * P.LAMBDA_REQUEST + gb_s * P.LAMBDA_GB_S_ARM64,
        "Logs": (r.log_bytes + platform_logs) / 1e9 * P.LOGS_PER_GB,
        "Scheduler": r.counters.get("scheduled_invocations", 0) * P.SCHEDULER_INVOCATION,
    }
    per_million = {k: v / n * 1e6 for k, v in parts.items()}
    throttled = sum(v for k, v in r.counters.items() if k.startswith(THROTTLED_PREFIX))
    for fn, usd in by_fn.items():
        per_million[f"(Lambda {fn})"] = usd / n * 1e6
    per_million["(Logs: Lambda's own lines)"] = platform_logs / 1e9 * P.LOGS_PER_GB / n * 1e6
    return Summary(
        r.strategy, r.scenario, r.n, len(r.deliveries), r.n - len(r.deliveries), early, dups,
        _pct(late, 0.5), _pct(late, 0.9), _pct(late, 0.99), float(late[-1]) if late else None,
        len(r.invocations), idle / days, sum(billed.values()) / n,
        {api: c / n for api, c in sorted(billed.items(), key=lambda kv: -kv[1])},
        sum(v for k, v in per_million.items() if not k.startswith("(")), per_million, r.wall_s,
        throttled_requests=throttled if r.partition_limits else None,
        throttled_user_puts=r.counters.get("user_puts_throttled", 0) if r.partition_limits else None,
        events_throttled=sum(v for k, v in r.counters.items() if k.startswith(EVENTS_THROTTLED_PREFIX)),
        fixed_usd_month=fixed_total(r.fixed_monthly) if r.fixed_monthly else None, fixed_parts=dict(r.fixed_monthly),
    )


# The figures combine_seeds keeps a spread of (the latency quantiles, the prices), and those it takes the
# worst of (a task lost, early or duplicated in any seed is shown).
SPREAD = ("p50", "p90", "p99", "max", "usd_per_million", "fixed_usd_month")
WORST = ("lost", "early", "duplicates")


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def combine_seeds(runs: list[tuple[int, Summary]]) -> Summary:
    """One Summary of the same scenario, strategy and reading run with several seeds: each figure the median
    over the seeds (of a quantile: the median of that quantile), lost / early / duplicates the most in any
    seed, the spread (min, max) of the latencies and prices kept in ``spread``, each seed's figures in
    ``per_seed`` (strategy_figures, with its seed), the wall time summed."""
    summaries = [s for _, s in runs]
    first = summaries[0]
    medians: dict[str, Any] = {
        k: _median([getattr(s, k) for s in summaries])
        for k in ("p50", "p90", "p99", "max", "invocations", "idle_per_day", "requests_per_task",
                  "usd_per_million", "fixed_usd_month", "delivered")}
    medians["invocations"], medians["delivered"] = int(medians["invocations"]), int(medians["delivered"])
    keys = dict.fromkeys(k for s in summaries for k in s.by_api)
    parts = dict.fromkeys(k for s in summaries for k in s.cost_parts)
    fixed = dict.fromkeys(k for s in summaries for k in s.fixed_parts)
    return replace(
        first, **medians, **{k: max(getattr(s, k) for s in summaries) for k in WORST},
        by_api={k: statistics.median(s.by_api.get(k, 0.0) for s in summaries) for k in keys},
        cost_parts={k: statistics.median(s.cost_parts.get(k, 0.0) for s in summaries) for k in parts},
        fixed_parts={k: statistics.median(s.fixed_parts.get(k, 0.0) for s in summaries) for k in fixed},
        wall_s=sum(s.wall_s for s in summaries), seeds=[seed for seed, _ in runs],
        spread={k: [min(vs), max(vs)] for k in SPREAD
                if (vs := [v for s in summaries if (v := getattr(s, k)) is not None])},
        per_seed=[{"seed": seed, **strategy_figures(s)} for seed, s in runs],
    )


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 60_000:
        return f"{v / 60_000:.1f} min"
    if abs(v) >= 10_000:
        return f"{v / 1000:.0f} s"
    return f"{v:.0f} ms"


DEFAULT_READINGS = ("public", "on-time")  # the tables name the reading only when another one ran


def _shows_reading(summaries: list[Summary]) -> bool:
    return any(s.reading not in DEFAULT_READINGS for s in summaries)


def _reading_cell(s: Summary, shown: bool) -> str:
    return f" {s.reading} |" if shown else ""


def _seeded(summaries: list[Summary]) -> bool:
    return any(len(s.seeds) > 1 for s in summaries)


def _bounds(lo: float, hi: float, fmt: Any) -> str:
    return f"{fmt(lo)} to {fmt(hi)}" if lo < 0 or hi < 0 else f"{fmt(lo)}-{fmt(hi)}"


def _ms_cell(s: Summary, key: str) -> str:
    """A latency: the median over the seeds, then their range when there are several."""
    value, spread = getattr(s, key), s.spread.get(key)
    if len(s.seeds) < 2 or spread is None or value is None:
        return _ms(value)
    if all(abs(v) < 10_000 for v in (value, *spread)):
        return f"{value:.0f} ms ({_bounds(spread[0], spread[1], lambda v: f'{v:.0f}')})"
    return f"{_ms(value)} ({_bounds(spread[0], spread[1], _ms)})"


def _usd_cell(s: Summary, key: str) -> str:
    value, spread = getattr(s, key), s.spread.get(key)
    if value is None:
        return "-"
    if len(s.seeds) < 2 or spread is None or round(spread[0], 2) == round(spread[1], 2):
        return f"${value:.2f}"
    return f"${value:.2f} (${spread[0]:.2f}-{spread[1]:.2f})"


def table(summaries: list[Summary]) -> str:
    shown, seeded = _shows_reading(summaries), _seeded(summaries)
    head = ("| scenario | strategy |" + (" reading |" if shown else "") + " tasks |" + (" seeds |" if seeded else "")
            + " delivered | lost | early | dup | p50 | p90 | p99 | max | invocations | idle inv/day | requests/task "
            "| USD per 1M tasks | fixed USD a month |")
    out = [head, "|" + "---|" * (16 + shown + seeded)]
    for s in summaries:
        seeds = f" {_seed_list(s.seeds)} |" if seeded else ""
        out.append(
            f"| {s.scenario} | {s.strategy} |{_reading_cell(s, shown)} {s.n:,} |{seeds} {s.delivered:,} | {s.lost:,} | "
            f"{s.early:,} | {s.duplicates:,} | {_ms_cell(s, 'p50')} | {_ms_cell(s, 'p90')} | {_ms_cell(s, 'p99')} | "
            f"{_ms_cell(s, 'max')} | {s.invocations:,} | {s.idle_per_day:.1f} | {s.requests_per_task:.2f} | "
            f"{_usd_cell(s, 'usd_per_million')} | {_usd_cell(s, 'fixed_usd_month')} |"
        )
    return "\n".join(out)


def _seed_list(seeds: list[int]) -> str:
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(map(str, seeds))


def table_notes(summaries: list[Summary]) -> str:
    """What the tables' figures are, for the readings and seeds they hold."""
    notes = ["Fixed USD a month: the deployment's alarms, the custom metrics its functions emitted (each $0.30 a "
             "month while emitted) and, in the default mode, the delay queue's idle receives; apart from the price "
             "per million tasks (which no longer holds the idle receives). A dashboard adds $3.00 a month when on."]
    if _seeded(summaries):
        notes.append("Several seeds: each figure is the median over the seeds (of a quantile, the median of that "
                     "quantile), with the range (min-max) in brackets; lost, early and dup are the most in any seed.")
    readings = dict.fromkeys(s.reading for s in summaries)
    if _shows_reading(summaries):
        notes.append("Readings: " + "; ".join(f"`{r}` {READING_NOTES.get(r, '')}" for r in readings) + ".")
    return "\n".join(f"- {n}" for n in notes)


READING_NOTES = {
    "public": "the models fitted to the public measurements (the default)",
    "on-time": "the default models, SQS delay timers on time as AWS documents",
    "early": "the default models with delayed messages visible up to 1 s before their delay ends (the stress "
    "reading, an assumption with no source)",
    "pessimistic": "every model at its pessimistic value (punctual/bench/models.py PESSIMISTIC, each with why; "
    "the early SQS timer included)",
}


def api_table(summaries: list[Summary]) -> str:
    shown = _shows_reading(summaries)
    out = ["| scenario | strategy |" + (" reading |" if shown else "")
           + " billed AWS requests per task, by API | USD per 1M tasks, by service | fixed USD a month, by part |",
           "|" + "---|" * (6 if shown else 5)]
    for s in summaries:
        apis = ", ".join(f"{api} {v:.2f}" for api, v in s.by_api.items() if v >= 0.005) or "-"
        cost = ", ".join(f"{k} ${v:.2f}" for k, v in s.cost_parts.items() if v >= 0.005) or "-"
        fixed = ", ".join(f"{k} ${v:.2f}" for k, v in s.fixed_parts.items() if v >= 0.005) or "-"
        out.append(f"| {s.scenario} | {s.strategy} |{_reading_cell(s, shown)} {apis} | {cost} | {fixed} |")
    return "\n".join(out)


def _int_ms(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def strategy_figures(s: Summary) -> dict[str, Any]:
    """One strategy's figures for ``punctual bench --json`` (lateness in whole ms, null when nothing
    was delivered; ``events_throttled``: rule calls refused over EventBridge's quota; ``fixed_usd_month``:
    the fixed monthly cost apart from the price per million, null for the alternatives' models);
    ``throttled_requests`` and ``throttled_user_puts`` only for runs that model DynamoDB's partition limits
    (firehose); several seeds: the medians, ``range`` (min, max per figure) and ``seeds`` (each one's)."""
    figures: dict[str, Any] = {
        "delivered": s.delivered, "lost": s.lost, "early": s.early, "duplicates": s.duplicates,
        "p50_ms": _int_ms(s.p50), "p90_ms": _int_ms(s.p90), "p99_ms": _int_ms(s.p99), "max_ms": _int_ms(s.max),
        "usd_per_million": round(s.usd_per_million, 4), "requests_per_task": round(s.requests_per_task, 4),
        "events_throttled": s.events_throttled,
        "fixed_usd_month": None if s.fixed_usd_month is None else round(s.fixed_usd_month, 4),
    }
    if s.throttled_requests is not None:
        figures.update(throttled_requests=s.throttled_requests, throttled_user_puts=s.throttled_user_puts)
    if len(s.seeds) > 1:
        figures["range"] = {f"{k}_ms" if k in ("p50", "p90", "p99", "max") else k: [round(v, 4) for v in lo_hi]
                            for k, lo_hi in s.spread.items()}
        figures["seeds"] = s.per_seed
    return figures


def _strategies(summaries: list[Summary], scenario: str) -> dict[str, dict[str, Any]]:
    return {s.strategy: strategy_figures(s) for s in summaries if s.scenario == scenario}


def machine_summary(summaries: list[Summary]) -> dict | list[dict]:
    """The ``--json`` document: per scenario (in the order of ``summaries``) ``{"scenario", "tasks", "reading",
    "sqs_model", "strategies": {strategy: figures}}`` for the first reading run, plus ``"<reading>": {strategy:
    figures}`` for each other one (``"early"``, ``"pessimistic"``), and ``"seeds"`` when several ran. One object
    for one scenario, else a list."""
    objects: list[dict] = []
    first_reading = summaries[0].reading if summaries else "public"
    for scenario in dict.fromkeys(s.scenario for s in summaries):
        mine = [s for s in summaries if s.scenario == scenario]
        first = next(s for s in mine if s.reading == first_reading)
        obj: dict = {"scenario": scenario, "tasks": first.n, "reading": first.reading, "sqs_model": first.sqs_model,
                     "strategies": _strategies([s for s in mine if s.reading == first_reading], scenario)}
        if len(first.seeds) > 1:
            obj["seeds"] = first.seeds
        for reading in dict.fromkeys(s.reading for s in mine if s.reading != first_reading):
            obj[reading] = _strategies([s for s in mine if s.reading == reading], scenario)
        objects.append(obj)
    return objects[0] if len(objects) == 1 else objects


def plots(results: list[RunResult], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    by_scenario: dict[str, list[RunResult]] = {}
    for r in results:
        by_scenario.setdefault(r.scenario, []).append(r)
    for name, runs in by_scenario.items():
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for r in runs:
            late = lateness(r)
            if not late:
                continue
            ys = [(k + 1) / r.n for k in range(len(late))]  # lost tasks keep the curve below 1
            ax.step([v / 1000 for v in late], ys, where="post", label=r.strategy)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xscale("symlog", linthresh=0.1)
        ax.set_xlabel("lateness (s; negative = early; symlog)")
        ax.set_ylabel("share of tasks delivered")
        ax.set_title(f"Lateness CDF: {name}")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower center", fontsize=8)
        path = out_dir / f"{name}-lateness-cdf.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

        fig, ax = plt.subplots(figsize=(7, 4.2))
        for r in runs:
            xs, ys = [], []
            for i, v in r.deliveries.items():
                if v:
                    xs.append(max(1, r.dues[i] - r.inserts[i]) / 1000)
                    ys.append((min(v) - r.dues[i]) / 1000)
            ax.scatter(xs, ys, s=3, alpha=0.4, label=r.strategy)
        ax.set_xscale("log")
        ax.set_yscale("symlog", linthresh=0.1)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("lead time: due - inserted (s, log)")
        ax.set_ylabel("lateness (s, symlog)")
        ax.set_title(f"Lateness vs lead time: {name}")
        ax.grid(alpha=0.3)
        ax.legend(markerscale=4)
        path = out_dir / f"{name}-lateness-vs-lead.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
