"""``punctual bench``: run scenarios, write bench/results/ (markdown table, JSON, PNG plots)."""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, replace
from pathlib import Path

from . import prices
from .alternatives import cdk_scheduler, eventbridge_scheduler
from .models import SOURCES, Models
from .punctual_sim import PunctualSim, RunResult
from .report import api_table, plots, summarize, table
from .scenarios import NAMES, build

STRATEGIES = ("punctual", "cdk-scheduler", "eventbridge-scheduler")
# Not run by default: Punctual with wake_early_ms=0 (DelaySeconds ceiled to the due time itself:
# the design before the wake-early setting; see docs/benchmark.md).
EXPERIMENTS = ("punctual-wake0",)
FAULT_RATES = {"fault_call_failure_rate": 0.01, "fault_crash_rate": 0.002}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", action="append", choices=NAMES,
                   help="scenario to run (repeatable; default: all)")
    p.add_argument("--quick", action="store_true", help="CI-sized scenarios (seconds, not minutes)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tasks", type=int, default=None, help="override the scenario's number of tasks")
    p.add_argument("--strategy", action="append", choices=STRATEGIES + EXPERIMENTS,
                   help="default: the three strategies; punctual-wake0 is Punctual with wake_early_ms=0")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a model parameter (see punctual/bench/models.py)")
    p.add_argument("--out", default="bench/results", help="output directory (default: bench/results)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--backend", choices=("moto", "fake"), default="moto",
                   help="AWS for the real handlers: moto via boto3 (default) or the in-memory fake "
                        "(punctual/bench/fastaws.py: no botocore/moto, ~10x faster; for 100,000-task runs)")
    p.add_argument("--combine", action="store_true",
                   help="only rebuild results.md from the results-*.json of earlier partial runs in --out")


def run_scenario(name: str, seed: int, quick: bool, models: Models, strategies=STRATEGIES,
                 tasks: int | None = None, backend: str = "moto") -> list[RunResult]:
    sc = build(name, seed, quick=quick, n=tasks)
    m = replace(models, **FAULT_RATES) if sc.faults else models
    out: list[RunResult] = []
    for strategy in strategies:
        started = time.perf_counter()
        if strategy in ("punctual", "punctual-wake0"):
            r = PunctualSim(sc, m, seed, wake_early_ms=0 if strategy == "punctual-wake0" else None,
                            backend=backend).run()
        elif strategy == "cdk-scheduler":
            r = cdk_scheduler(sc, m, seed)
        else:
            r = eventbridge_scheduler(sc, m, seed)
        r.wall_s = time.perf_counter() - started
        out.append(r)
    return out


def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    for k, v in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench"),
                 ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(k, v)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    models = Models().with_overrides(args.set)
    out_dir = Path(args.out)
    if args.combine:
        return combine(out_dir)
    names = args.scenario or NAMES
    strategies = tuple(args.strategy or STRATEGIES)
    out_dir.mkdir(parents=True, exist_ok=True)
    results: list[RunResult] = []
    for name in names:
        started = time.perf_counter()
        rs = run_scenario(name, args.seed, args.quick, models, strategies, args.tasks,
                              backend=getattr(args, "backend", "moto"))
        results += rs
        print(f"{name}: {', '.join(f'{r.strategy} {r.wall_s:.1f} s' for r in rs)} "
              f"({time.perf_counter() - started:.1f} s)", flush=True)
    summaries = [summarize(r) for r in results]
    cmd = "punctual bench" + (" --quick" if args.quick else "") + f" --seed {args.seed}" + "".join(
        f" --scenario {n}" for n in (args.scenario or [])) + (f" --tasks {args.tasks}" if args.tasks else "") + "".join(
        f" --strategy {st}" for st in (args.strategy or [])) + (
        f" --backend {args.backend}" if getattr(args, "backend", "moto") != "moto" else "") + "".join(
        f" --set {kv}" for kv in args.set)
    text = "\n\n".join([
        f"# Benchmark results\n\nCommand: `{cmd}`  \nPrices: {prices.PRICES_REGION} on-demand, "
        f"written down {prices.PRICES_DATE} (punctual/bench/prices.py).",
        table(summaries),
        "## Requests and cost by API\n\n" + api_table(summaries),
        "## Run times (wall clock)\n\n" + "\n".join(
            f"- {s.scenario} / {s.strategy}: {s.wall_s:.1f} s" for s in summaries),
        "## Simulator counters\n\n" + "\n".join(
            f"- {r.scenario} / {r.strategy}: " + ", ".join(f"{k}={v}" for k, v in sorted(r.counters.items()))
            for r in results if r.counters),
        "## Model parameters\n\n" + "\n".join(
            f"- `{k}` = {v}" + (f": {SOURCES[k]}" if k in SOURCES else "") for k, v in asdict(models).items()),
    ])
    stem = "results" if not args.scenario else "results-" + "-".join(args.scenario)
    (out_dir / f"{stem}.md").write_text(text + "\n")
    (out_dir / f"{stem}.json").write_text(
        json.dumps({"command": cmd, "summaries": [asdict(s) for s in summaries]}, indent=1) + "\n")
    if not args.no_plots:
        plots(results, out_dir)
    print()
    print(table(summaries))
    print(f"\nwritten: {out_dir}/{stem}.md, {stem}.json" + ("" if args.no_plots else ", *.png"))
    return 0


def combine(out_dir: Path) -> int:
    """One table from partial runs (e.g. scenarios run in parallel processes)."""
    from .report import Summary

    summaries, commands = [], []
    for path in sorted(out_dir.glob("results-*.json")):
        data = json.loads(path.read_text())
        commands.append(data["command"])
        summaries += [Summary(**s) for s in data["summaries"]]
    order = {name: k for k, name in enumerate(NAMES)}
    ranks = STRATEGIES + EXPERIMENTS
    summaries.sort(key=lambda s: (order.get(s.scenario, 99), ranks.index(s.strategy)))
    text = "\n\n".join([
        "# Benchmark results\n\nCommands: " + "; ".join(f"`{c}`" for c in commands)
        + f"  \nPrices: {prices.PRICES_REGION} on-demand, written down {prices.PRICES_DATE}.",
        table(summaries),
        "## Requests and cost by API\n\n" + api_table(summaries),
        "## Run times (wall clock)\n\n" + "\n".join(
            f"- {s.scenario} / {s.strategy}: {s.wall_s:.1f} s" for s in summaries),
    ])
    (out_dir / "results.md").write_text(text + "\n")
    print(table(summaries))
    return 0


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="punctual bench", description=__doc__)
    add_arguments(p)
    return main(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(cli())
