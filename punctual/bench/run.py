"""``punctual bench``: run scenarios, write their results (markdown table, JSON, PNG plots) to ``--out``, to
a new temporary directory by default, or to the repository's bench/results/ with ``--publish``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from punctual.core.config import DIRECT_LEAD_SECONDS

from . import models_file, prices
from .alternatives import eventbridge_scheduler
from .cdk_scheduler import cdk_scheduler
from .models import PESSIMISTIC, PESSIMISTIC_WHY, READINGS, SOURCES, Models, reading
from .punctual_sim import PunctualSim, RunResult
from .report import Summary, api_table, combine_seeds, machine_summary, plots, summarize, table, table_notes
from .scenarios import DEFAULT_NAMES, NAMES, build

# Strategies that run Punctual's real handlers, with the Settings each overrides: punctual-direct is
# the direct delivery mode as the construct deploys it (Settings.delivery = "direct": the poller and
# the editor send each task to the delivery queue with DelaySeconds; no delay queue, no consumer: poll
# requests and failure notices go through an SNS control topic to the poller; docs/benchmark.md, "Direct
# delivery").
PUNCTUAL_STRATEGIES: dict[str, dict[str, Any]] = {
    "punctual": {}, "punctual-direct": {"delivery": "direct", "lead_seconds": DIRECT_LEAD_SECONDS}}
STRATEGIES = (*PUNCTUAL_STRATEGIES, "cdk-scheduler", "eventbridge-scheduler")
# Strategies a scenario runs without --strategy, when not all: the alternatives' models have no
# DynamoDB partition limits, so their firehose figures would be those of an unthrottled table.
SCENARIO_STRATEGIES = {"firehose": tuple(PUNCTUAL_STRATEGIES)}
# Not run by default: Punctual with one setting changed, to show what it buys (docs/benchmark.md).
# punctual-wake0: wake_early_ms=0 (DelaySeconds ceiled to the due time itself: the design before
# the wake-early setting); punctual-per-row: group_span_ms=0 (one delay-queue message per row:
# the design before groups). (punctual-direct-no-delay-queue is gone: direct delivery deploys no delay
# queue now, punctual-direct is that.)
EXPERIMENTS: dict[str, dict[str, Any]] = {
    "punctual-wake0": {"wake_early_ms": 0},
    "punctual-per-row": {"group_span_ms": 0},
}
# Readings (`--reading`, repeatable): "public" (the models fitted to the public measurements, the default),
# "pessimistic" (every parameter at its pessimistic value, models.PESSIMISTIC), "early" (the public fit with the
# early SQS timer, the stress reading of the never-early invariant); "both" = public and pessimistic.
READING_CHOICES = (*READINGS, "both")
# `--sqs-model`, kept: on-time = the public fit with the SQS timer on time whatever --set says ("on-time"),
# early = the early reading, both = the two, the documented one first (see SOURCES["sqs_early_max_ms"]).
SQS_MODELS = ("on-time", "early", "both")
EXTRA = "pip install 'punctual-aws[bench]'"  # the packages a run needs beyond the wheel's own
PUBLISHED = "bench/results"  # the repository's published results: written only with --publish


def missing_modules(backend: str, plots: bool) -> list[str]:
    """What a run would fail to import, the wheel's dependencies aside: freezegun (virtual time,
    both backends), moto (the moto backend), matplotlib (the plots)."""
    needed = ["freezegun", *(["moto"] if backend == "moto" else []), *(["matplotlib"] if plots else [])]
    return [name for name in needed if importlib.util.find_spec(name) is None]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", action="append", choices=NAMES,
                   help="scenario to run (repeatable; default: all but firehose, which needs --backend fake)")
    p.add_argument("--quick", action="store_true", help="CI-sized scenarios (seconds, not minutes)")
    p.add_argument("--seed", type=int, default=None, help="one seed (default 1; see --seeds)")
    p.add_argument("--seeds", default=None, metavar="SEEDS",
                   help="several seeds, e.g. 1-5 or 1,2,3,4,5: every figure is their median, with its range "
                        "(the headlines are the median of 5 seeds)")
    p.add_argument("--tasks", type=int, default=None, help="override the scenario's number of tasks")
    p.add_argument("--rate", type=int, default=None,
                   help="firehose only: inserts a second (default 10,000; for 60 s unless --tasks says how many)")
    p.add_argument("--strategy", action="append", choices=STRATEGIES + tuple(EXPERIMENTS),
                   help="default: every strategy but the experiments; punctual-direct is Punctual's direct "
                        "delivery mode (delivery=direct: no delay queue, no consumer, an SNS control topic), "
                        "punctual-wake0 Punctual with wake_early_ms=0, "
                        "punctual-per-row with group_span_ms=0")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a model parameter (see punctual/bench/models.py)")
    p.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                   help="override an integer Settings field in every Punctual run (e.g. wake_early_ms=250, "
                        "group_span_ms=0; see punctual/core/config.py)")
    p.add_argument("--shards", type=int, default=None,
                   help="Punctual's shards (Settings.shards; tasks spread over that many partitions by id, "
                        "docs/architecture.md \"Shards\"); the same as --setting shards=N")
    p.add_argument("--out", default=None,
                   help="output directory (default: a new temporary directory, printed; see --publish)")
    p.add_argument("--publish", action="store_true",
                   help=f"write into {PUBLISHED} (the repository's published results; run from its root)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--backend", choices=("moto", "fake"), default="moto",
                   help="AWS for the real handlers: moto via boto3 (default) or the in-memory fake "
                        "(punctual/bench/fastaws.py: no botocore/moto, ~10x faster; for 100,000-task runs)")
    p.add_argument("--reading", action="append", choices=READING_CHOICES, default=None,
                   help="the models' reading (repeatable): public = fitted to the public measurements (the "
                        "default), pessimistic = every parameter at its pessimistic value, early = public with "
                        "the early SQS timer; both = public and pessimistic, side by side")
    p.add_argument("--sqs-model", choices=SQS_MODELS, default=None,
                   help="SQS delay timers only: on-time = visible when DelaySeconds elapse, as AWS documents "
                        "(sqs_early_max_ms=0); early = the early reading (up to 1 s before, or sqs_early_max_ms "
                        "when set); both = the two, the documented one first")
    p.add_argument("--models", default=None, metavar="FILE",
                   help="a JSON file of model overrides, distributions included (what `punctual calibrate` "
                        "writes; docs/benchmark.md, \"A models file\"); --set applies on top")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="also write a machine-readable summary (one object per scenario; a list when several)")
    p.add_argument("--combine", action="store_true",
                   help="only rebuild results.md from the results-*.json of earlier partial runs in --out "
                        "(or bench/results with --publish)")


def settings_overrides(pairs: list[str]) -> dict[str, int]:
    """``--setting NAME=VALUE`` pairs as Settings overrides (integer fields only)."""
    from punctual.core.config import Settings

    kinds = {f.name: f.type for f in fields(Settings)}
    out: dict[str, int] = {}
    for pair in pairs:
        name, _, raw = pair.partition("=")
        if kinds.get(name) not in (int, "int"):
            known = ", ".join(sorted(n for n, k in kinds.items() if k in (int, "int")))
            raise SystemExit(f"--setting {name!r}: not an integer Settings field; known: {known}")
        try:
            out[name] = int(raw)
        except ValueError:
            raise SystemExit(f"--setting {pair!r}: {raw!r} is not an integer") from None
    return out


def run_settings(args: argparse.Namespace) -> dict[str, int]:
    """The Settings overrides of every Punctual run: ``--setting`` pairs, then ``--shards``."""
    from punctual.core.shards import MAX_SHARDS

    out = settings_overrides(getattr(args, "setting", []))
    if getattr(args, "shards", None) is not None:
        out["shards"] = args.shards
    if "shards" in out and not 1 <= out["shards"] <= MAX_SHARDS:
        raise SystemExit(f"--shards {out['shards']}: shards must be 1..{MAX_SHARDS}")
    return out


def run_scenario(name: str, seed: int, quick: bool, models: Models, strategies=STRATEGIES,
                 tasks: int | None = None, backend: str = "moto",
                 settings: dict[str, Any] | None = None, rate: int | None = None) -> list[RunResult]:
    sc = build(name, seed, quick=quick, n=tasks, rate=rate)
    m = models  # the fault rates apply to the faults scenario only (the simulators check sc.faults)
    out: list[RunResult] = []
    for strategy in strategies:
        started = time.perf_counter()
        own = PUNCTUAL_STRATEGIES.get(strategy, EXPERIMENTS.get(strategy))
        if own is not None:
            r = PunctualSim(sc, m, seed, settings={**(settings or {}), **own}, backend=backend, name=strategy).run()
        elif strategy == "cdk-scheduler":
            r = cdk_scheduler(sc, m, seed)
        else:
            r = eventbridge_scheduler(sc, m, seed)
        r.wall_s = time.perf_counter() - started
        out.append(r)
    return out


def sqs_model_label(models: Models) -> str:
    return "early" if models.sqs_early_max_ms > 0 else "on-time"


def seeds_of(args: argparse.Namespace) -> list[int]:
    """``--seeds 1-5`` or ``--seeds 1,2,3``, else ``--seed N`` (default 1)."""
    spec, one = getattr(args, "seeds", None), getattr(args, "seed", None)
    if spec is None:
        return [1 if one is None else one]
    if one is not None:
        raise SystemExit("--seed and --seeds: choose one")
    try:
        if "-" in spec.strip("-"):
            lo, hi = (int(x) for x in spec.split("-", 1))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in spec.split(",")]
    except ValueError:
        raise SystemExit(f"--seeds {spec!r}: a range (1-5) or a list (1,2,3)") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise SystemExit(f"--seeds {spec!r}: at least one seed, none twice")
    return seeds


def reading_names(args: argparse.Namespace) -> list[str]:
    """The readings a run uses, in order: ``--reading`` (both = public, pessimistic), or ``--sqs-model``
    (on-time, early, both = on-time and early), else the public fit alone."""
    chosen, sqs = getattr(args, "reading", None), getattr(args, "sqs_model", None)
    if chosen and sqs:
        raise SystemExit("--reading and --sqs-model: choose one (--reading early is --sqs-model early)")
    if sqs:
        return {"on-time": ["on-time"], "early": ["early"], "both": ["on-time", "early"]}[sqs]
    names = [n for c in chosen or ["public"] for n in (("public", "pessimistic") if c == "both" else (c,))]
    return list(dict.fromkeys(names))


def model_readings(names: list[str], base: Models, file: models_file.ModelsFile | None = None,
                   set_pairs: list[str] | tuple[str, ...] = ()) -> list[tuple[str, Models]]:
    """Each reading's models, the first the default. ``base``: the public fit with the models file's and
    ``--set``'s overrides; a parameter either sets is kept in every reading (theirs win), except that the
    file's ``pessimistic`` values are the pessimistic reading's (``--set`` still wins) and "on-time" is the
    SQS timer on time whatever they say."""
    file = file or models_file.ModelsFile()
    set_names = {pair.partition("=")[0] for pair in set_pairs}
    kept = frozenset(set(file.models) | set_names)
    out: list[tuple[str, Models]] = []
    for name in names:
        if name == "on-time":
            models = replace(base, sqs_early_max_ms=0)
        else:
            models = reading(name, base, kept)
        if name == "pessimistic":
            models = replace(models, **{k: v for k, v in file.pessimistic.items() if k not in set_names})
        out.append((name, models))
    return out


def _command(args: argparse.Namespace) -> str:
    backend, sqs_model = getattr(args, "backend", "moto"), getattr(args, "sqs_model", None)
    seeds = seeds_of(args)
    seed = f" --seeds {args.seeds}" if getattr(args, "seeds", None) else f" --seed {seeds[0]}"
    return ("punctual bench" + (" --quick" if args.quick else "") + seed
            + "".join(f" --scenario {n}" for n in (args.scenario or []))
            + (f" --tasks {args.tasks}" if args.tasks else "")
            + (f" --rate {args.rate}" if getattr(args, "rate", None) else "")
            + (f" --shards {args.shards}" if getattr(args, "shards", None) else "")
            + "".join(f" --strategy {st}" for st in (args.strategy or []))
            + (f" --backend {backend}" if backend != "moto" else "")
            + "".join(f" --reading {r}" for r in (getattr(args, "reading", None) or []))
            + (f" --sqs-model {sqs_model}" if sqs_model else "")
            + (f" --models {args.models}" if getattr(args, "models", None) else "")
            + "".join(f" --set {kv}" for kv in args.set)
            + "".join(f" --setting {kv}" for kv in getattr(args, "setting", [])))


def _summary_order(s: Summary) -> tuple[int, int]:
    """Scenarios in NAMES order, then strategies; a stable sort keeps the readings of one strategy side by
    side, in the order they ran."""
    ranks = STRATEGIES + tuple(EXPERIMENTS)
    return (NAMES.index(s.scenario) if s.scenario in NAMES else 99, ranks.index(s.strategy))


def _run_all(args: argparse.Namespace, readings: list[tuple[str, Models]]) -> tuple[list[RunResult], list[Summary]]:
    """Every scenario under every reading with every seed, one after the other. Each (scenario, strategy,
    reading) gives one Summary, the median of its seeds (report.combine_seeds); the RunResults kept (plots,
    counters) are the first seed's, named "<strategy> (<reading>)" for a reading other than the first."""
    results: list[RunResult] = []
    summaries: list[Summary] = []
    seeds = seeds_of(args)
    for name in args.scenario or DEFAULT_NAMES:
        strategies = tuple(args.strategy or SCENARIO_STRATEGIES.get(name, STRATEGIES))
        for label, models in readings:
            per_seed: dict[str, list[tuple[int, Summary]]] = {st: [] for st in strategies}
            for seed in seeds:
                started = time.perf_counter()
                rs = run_scenario(name, seed, args.quick, models, strategies, args.tasks,
                                  backend=getattr(args, "backend", "moto"), settings=run_settings(args),
                                  rate=getattr(args, "rate", None))
                for r in rs:
                    per_seed[r.strategy].append(
                        (seed, replace(summarize(r), reading=label, sqs_model=sqs_model_label(models))))
                if seed == seeds[0]:
                    results += rs if label == readings[0][0] else [
                        replace(r, strategy=f"{r.strategy} ({label})") for r in rs]
                print(f"{name} [{label}, seed {seed}]: {', '.join(f'{r.strategy} {r.wall_s:.1f} s' for r in rs)} "
                      f"({time.perf_counter() - started:.1f} s)", flush=True)
            summaries += [combine_seeds(runs) for runs in per_seed.values()]
    summaries.sort(key=_summary_order)
    return results, summaries


def _model_parameters(readings: list[tuple[str, Models]], sources: dict[str, str]) -> str:
    """Every parameter of the first reading with its source (a models file's first), then each other
    reading's differences with why."""
    first_name, first = readings[0]
    lines = [f"- `{k}` = {_value(v)}: {sources.get(k) or SOURCES.get(k, '')}".rstrip(": ")
             for k, v in asdict_shallow(first).items()]
    for name, models in readings[1:]:
        changed = {k: v for k, v in asdict_shallow(models).items() if getattr(first, k) != v}
        lines.append(f"\nReading `{name}` differs from `{first_name}` in: " + ("; ".join(
            f"`{k}` = {_value(v)}" + (f" ({PESSIMISTIC_WHY[k]})" if name == "pessimistic" and k in PESSIMISTIC_WHY
                                      and PESSIMISTIC.get(k) == v else "")
            for k, v in changed.items()) or "nothing") + ".")
    return "\n".join(lines)


def asdict_shallow(models: Models) -> dict[str, Any]:
    return {f.name: getattr(models, f.name) for f in fields(models)}


def _value(v: Any) -> str:
    return v.describe() if hasattr(v, "describe") else str(v)


def _run_times(summaries: list[Summary]) -> str:
    return "## Run times (wall clock)\n\n" + "\n".join(
        f"- {s.scenario} / {s.strategy} [{s.reading}]: {s.wall_s:.1f} s"
        + (f" ({len(s.seeds)} seeds)" if len(s.seeds) > 1 else "") for s in summaries)


def _report(cmd: str, results: list[RunResult], summaries: list[Summary], readings: list[tuple[str, Models]],
            sources: dict[str, str]) -> str:
    return "\n\n".join([
        f"# Benchmark results\n\nCommand: `{cmd}`  \nPrices: {prices.PRICES_REGION} on-demand, "
        f"written down {prices.PRICES_DATE} (punctual/bench/prices.py).",
        table(summaries) + "\n\n" + table_notes(summaries),
        "## Requests and cost by API\n\n" + api_table(summaries),
        _run_times(summaries),
        "## Simulator counters\n\n" + ("(the first seed's)\n\n" if any(len(s.seeds) > 1 for s in summaries) else "")
        + "\n".join(
            f"- {r.scenario} / {r.strategy}: " + ", ".join(f"{k}={v}" for k, v in sorted(r.counters.items()))
            for r in results if r.counters),
        "## Custom metrics emitted\n\n" + ("(the first seed's)\n\n" if any(len(s.seeds) > 1 for s in summaries) else "")
        + "\n".join(f"- {r.scenario} / {r.strategy}: {len(r.metrics_emitted)}: {', '.join(r.metrics_emitted)}"
                    for r in results if r.fixed_monthly),
        "## Model parameters\n\n" + _model_parameters(readings, sources),
    ])


def output_dir(args: argparse.Namespace) -> Path:
    """``--out``, or bench/results with ``--publish``, or a new temporary directory (printed): a run writes
    into the repository only when asked."""
    out, publish = getattr(args, "out", None), getattr(args, "publish", False)
    if out and publish:
        raise SystemExit("--out and --publish: choose one")
    if publish:
        return Path(PUBLISHED)
    if out:
        return Path(out)
    if args.combine:
        raise SystemExit("--combine needs --out DIR (or --publish)")
    path = Path(tempfile.mkdtemp(prefix="punctual-bench-"))
    print(f"output: {path} (--out DIR to choose, --publish for {PUBLISHED})", flush=True)
    return path


def main(args: argparse.Namespace) -> int:
    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    for k, v in (("AWS_ACCESS_KEY_ID", "bench"), ("AWS_SECRET_ACCESS_KEY", "bench"),
                 ("AWS_DEFAULT_REGION", "us-east-1")):
        os.environ.setdefault(k, v)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    missing = [] if args.combine else missing_modules(getattr(args, "backend", "moto"), plots=not args.no_plots)
    if missing:  # before minutes of running, and before making a folder for results there will not be
        hint = " (or pass --no-plots)" if missing == ["matplotlib"] else ""
        raise SystemExit(f"punctual bench needs {', '.join(missing)}: {EXTRA}{hint}")
    out_dir = output_dir(args)
    if args.combine:
        return combine(out_dir)
    file = models_file.load(args.models) if getattr(args, "models", None) else models_file.ModelsFile()
    seeds_of(args)  # a bad --seeds stops the run before it starts
    base = replace(Models(), **file.models).with_overrides(args.set)
    readings = model_readings(reading_names(args), base, file, args.set)
    out_dir.mkdir(parents=True, exist_ok=True)
    results, summaries = _run_all(args, readings)
    cmd = _command(args)
    stem = "results" if not args.scenario else "results-" + "-".join(args.scenario)
    (out_dir / f"{stem}.md").write_text(_report(cmd, results, summaries, readings, file.sources) + "\n")
    (out_dir / f"{stem}.json").write_text(
        json.dumps({"command": cmd, "summaries": [asdict(s) for s in summaries]}, indent=1) + "\n")
    written = [f"{out_dir}/{stem}.md", f"{stem}.json"]
    if getattr(args, "json", None):
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(machine_summary(summaries), indent=1) + "\n")
        written.append(args.json)
    if not args.no_plots:
        plots(results, out_dir)
        written.append("*.png")
    print()
    print(table(summaries))
    print(f"\nwritten: {', '.join(written)}")
    return 0


def combine(out_dir: Path) -> int:
    """One table from partial runs (e.g. scenarios run in parallel processes)."""
    summaries, commands = [], []
    for path in sorted(out_dir.glob("results-*.json")):
        data = json.loads(path.read_text())
        commands.append(data["command"])
        summaries += [Summary(**s) for s in data["summaries"]]
    summaries.sort(key=_summary_order)
    text = "\n\n".join([
        "# Benchmark results\n\nCommands: " + "; ".join(f"`{c}`" for c in commands)
        + f"  \nPrices: {prices.PRICES_REGION} on-demand, written down {prices.PRICES_DATE}.",
        table(summaries) + "\n\n" + table_notes(summaries),
        "## Requests and cost by API\n\n" + api_table(summaries),
        _run_times(summaries),
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
