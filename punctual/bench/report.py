"""Numbers, the markdown table and the plots of a benchmark run."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from . import prices as P
from .billing import IDLE_RECEIVE_API, platform_log_bytes
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
    # The SQS delay-timer model the run used (run.sqs_model_label): "on-time" (documented) or "early".
    sqs_model: str = "on-time"
    # DynamoDB requests refused over a partition's limit (all actors, the producer's puts included)
    # and the producer's puts refused at least once; None when the run does not model the limits.
    throttled_requests: int | None = None
    throttled_user_puts: int | None = None
    # EventBridge control-plane calls refused over the account's quota (punctual.bench.control_plane).
    events_throttled: int = 0


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
        if actor == "user" or api.startswith("dynamodbstreams") or api.startswith("lambda."):
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
    per_million["(SQS: idle receives)"] = billed.get(IDLE_RECEIVE_API, 0) * P.SQS_REQUEST / n * 1e6
    return Summary(
        r.strategy, r.scenario, r.n, len(r.deliveries), r.n - len(r.deliveries), early, dups,
        _pct(late, 0.5), _pct(late, 0.9), _pct(late, 0.99), float(late[-1]) if late else None,
        len(r.invocations), idle / days, sum(billed.values()) / n,
        {api: c / n for api, c in sorted(billed.items(), key=lambda kv: -kv[1])},
        sum(v for k, v in per_million.items() if not k.startswith("(")), per_million, r.wall_s,
        throttled_requests=throttled if r.partition_limits else None,
        throttled_user_puts=r.counters.get("user_puts_throttled", 0) if r.partition_limits else None,
        events_throttled=sum(v for k, v in r.counters.items() if k.startswith(EVENTS_THROTTLED_PREFIX)),
    )


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 60_000:
        return f"{v / 60_000:.1f} min"
    if abs(v) >= 10_000:
        return f"{v / 1000:.0f} s"
    return f"{v:.0f} ms"


def _shows_sqs_model(summaries: list[Summary]) -> bool:
    """The tables name the SQS model only when a run used one other than the default (on-time)."""
    return any(s.sqs_model != "on-time" for s in summaries)


def _model_cell(s: Summary, shown: bool) -> str:
    return f" {s.sqs_model} |" if shown else ""


def table(summaries: list[Summary]) -> str:
    shown = _shows_sqs_model(summaries)
    head = ("| scenario | strategy |" + (" SQS model |" if shown else "") + " tasks | delivered | lost | early "
            "| dup | p50 | p90 | p99 | max | invocations | idle inv/day | requests/task | USD per 1M tasks |")
    out = [head, "|" + "---|" * (16 if shown else 15)]
    for s in summaries:
        out.append(
            f"| {s.scenario} | {s.strategy} |{_model_cell(s, shown)} {s.n:,} | {s.delivered:,} | {s.lost:,} | {s.early:,} | "
            f"{s.duplicates:,} | {_ms(s.p50)} | {_ms(s.p90)} | {_ms(s.p99)} | {_ms(s.max)} | "
            f"{s.invocations:,} | {s.idle_per_day:.1f} | {s.requests_per_task:.2f} | ${s.usd_per_million:.2f} |"
        )
    return "\n".join(out)


def api_table(summaries: list[Summary]) -> str:
    shown = _shows_sqs_model(summaries)
    out = ["| scenario | strategy |" + (" SQS model |" if shown else "")
           + " billed AWS requests per task, by API | USD per 1M tasks, by service |",
           "|" + "---|" * (5 if shown else 4)]
    for s in summaries:
        apis = ", ".join(f"{api} {v:.2f}" for api, v in s.by_api.items() if v >= 0.005) or "-"
        cost = ", ".join(f"{k} ${v:.2f}" for k, v in s.cost_parts.items() if v >= 0.005) or "-"
        out.append(f"| {s.scenario} | {s.strategy} |{_model_cell(s, shown)} {apis} | {cost} |")
    return "\n".join(out)


def _int_ms(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def strategy_figures(s: Summary) -> dict[str, int | float | None]:
    """One strategy's figures for ``punctual bench --json`` (lateness in whole ms, null when nothing
    was delivered; ``events_throttled``: rule calls refused over EventBridge's quota);
    ``throttled_requests`` and ``throttled_user_puts`` only for runs that
    model DynamoDB's partition limits (firehose)."""
    figures: dict[str, int | float | None] = {
        "delivered": s.delivered, "lost": s.lost, "early": s.early, "duplicates": s.duplicates,
        "p50_ms": _int_ms(s.p50), "p90_ms": _int_ms(s.p90), "p99_ms": _int_ms(s.p99), "max_ms": _int_ms(s.max),
        "usd_per_million": round(s.usd_per_million, 4), "requests_per_task": round(s.requests_per_task, 4),
        "events_throttled": s.events_throttled,
    }
    if s.throttled_requests is not None:
        figures.update(throttled_requests=s.throttled_requests, throttled_user_puts=s.throttled_user_puts)
    return figures


def _strategies(summaries: list[Summary], scenario: str) -> dict[str, dict[str, int | float | None]]:
    return {s.strategy: strategy_figures(s) for s in summaries if s.scenario == scenario}


def machine_summary(summaries: list[Summary], early: list[Summary] | None = None) -> dict | list[dict]:
    """The ``--json`` document: per scenario (in the order of ``summaries``) ``{"scenario", "tasks", "sqs_model",
    "strategies": {strategy: figures}}``, plus ``"early": {strategy: figures}`` when the same run was
    repeated under the early SQS reading (the stress assumption). One object for one scenario, else a list."""
    objects: list[dict] = []
    for scenario in dict.fromkeys(s.scenario for s in summaries):
        first = next(s for s in summaries if s.scenario == scenario)
        obj: dict = {"scenario": scenario, "tasks": first.n, "sqs_model": first.sqs_model,
                     "strategies": _strategies(summaries, scenario)}
        if early is not None:
            obj["early"] = _strategies(early, scenario)
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
