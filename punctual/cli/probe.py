"""``punctual probe``: measure the SQS delay timer where Punctual runs, on a temporary queue it
creates and deletes (docs/probe.md). The figures and the file are punctual/probe.py's.

It prints its requests, their price and its duration first; against anything but a local endpoint
it starts only with ``--yes``. It never touches the scheduler's own queues or table: its one queue,
``punctual-probe-<random>``, is deleted when it ends, fails, or is interrupted (Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from punctual.core.clock import Clock, SystemClock, sleep_until
from punctual.probe import (
    DEFAULT_DELAYS,
    QUEUE_PREFIX,
    SPACING_MS,
    TIMEOUT_S,
    ProbePlan,
    ProbeRun,
    Sample,
    plan_lines,
    report,
    summary_lines,
)

from .exits import CliError
from .target import resolve_target

RECEIVE_BATCH = 10
TIMESTAMPS = ["SentTimestamp", "ApproximateFirstReceiveTimestamp"]
# The probe's queue: a message once received stays invisible for the rest of the probe (12 h, SQS's
# most), so it is received once; none is kept longer than an hour if the queue outlives the probe.
QUEUE_ATTRIBUTES = {"VisibilityTimeout": "43200", "MessageRetentionPeriod": "3600"}


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("probe", parents=[common],
                       help="measure the SQS delay timer (early / late) on a temporary queue; prints its cost first")
    p.add_argument("--delays", type=_delays, default=DEFAULT_DELAYS, metavar="S,S,...",
                   help=f"DelaySeconds to measure, 0..900 (default {','.join(map(str, DEFAULT_DELAYS))})")
    p.add_argument("--samples", type=int, default=5, help="messages per delay (default 5)")
    p.add_argument("--wait", type=int, default=None, metavar="SECONDS",
                   help="each receive's WaitTimeSeconds, 0..20 (default 1: long polling, which returns a message "
                        "as soon as it is visible; 0 on a local endpoint, whose long polls see a delayed message "
                        "only once a second)")
    p.add_argument("--interval", type=int, default=50, metavar="MS",
                   help="at least this long between two receives' starts (default 50)")
    p.add_argument("--spacing", type=int, default=SPACING_MS, metavar="MS",
                   help=f"between two sends (default {SPACING_MS})")
    p.add_argument("--timeout", type=int, default=TIMEOUT_S, metavar="SECONDS",
                   help=f"how long after its delay a message is waited for (default {TIMEOUT_S})")
    p.add_argument("--margin", type=int, default=None, metavar="MS",
                   help="direct delivery's early margin to judge (default: the deployment's "
                        "PUNCTUAL_DIRECT_EARLY_MARGIN_MS, local.json, or the setting's default)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="the JSON file (default ./punctual-probe-<UTC time>.json)")
    p.add_argument("--yes", action="store_true", help="run against a non-local endpoint (real AWS): it makes requests")
    p.set_defaults(run=cmd_probe)


def _delays(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"whole seconds separated by commas, got {text!r}") from None


def cmd_probe(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    try:
        plan = ProbePlan(delays=args.delays, samples=args.samples, interval_ms=args.interval,
                         wait_s=(0 if target.is_local() else 1) if args.wait is None else args.wait,
                         spacing_ms=args.spacing, timeout_s=args.timeout)
    except ValueError as exc:
        raise CliError(f"probe: {exc}") from None
    queue = QUEUE_PREFIX + secrets.token_hex(4)
    where = target.endpoint_url or f"AWS, {target.region}"
    print("\n".join(plan_lines(plan, where, queue)), flush=True)
    if not target.is_local() and not args.yes:
        raise CliError(f"probe not started: it makes the requests above on {where}; pass --yes to run it")
    margin = target.direct_early_margin_ms if args.margin is None else args.margin
    run = ProbeRun(plan, target.endpoint_url or "AWS", target.region, queue)
    with _sigterm_interrupts():
        probe(target.clients()["sqs"], run, SystemClock())
    out = Path(args.out or f"punctual-probe-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json")
    out.write_text(json.dumps(report(run, margin), indent=1) + "\n")
    print("\n".join(summary_lines(run, margin)))
    print(f"written: {out}")
    return 0


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (a kill, a CI timeout) interrupts as Ctrl-C does, so the queue is deleted."""
    def interrupt(*_: Any) -> None:
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, interrupt) if main else None
    try:
        yield
    finally:
        if main:  # a handler not set from Python reads as None: the default then
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def probe(sqs: Any, run: ProbeRun, clock: Clock) -> None:
    """Create the queue, send the plan's messages on time while a receiver records each first
    receive, until all are received or the plan's duration is over; the queue is deleted whatever
    happens (an interruption included)."""
    url: str | None = None
    stop = threading.Event()
    receiver: threading.Thread | None = None
    try:
        url = sqs.create_queue(QueueName=run.queue, Attributes=QUEUE_ATTRIBUTES,
                               tags={"punctual": "probe"})["QueueUrl"]
        run.samples = [Sample(delay) for _, delay in run.plan.sends()]
        run.started_ms = clock.now_ms()
        done = threading.Event()
        receiver = threading.Thread(target=_receive_all, args=(sqs, url, run, clock, stop, done),
                                    name="probe-receiver", daemon=True)
        receiver.start()
        _send_all(sqs, url, run, clock)
        end = run.started_ms + run.plan.duration_ms()
        while not done.wait(0.2) and clock.now_ms() < end:
            pass
    finally:
        run.ended_ms = clock.now_ms()
        stop.set()
        if receiver is not None:
            receiver.join(timeout=run.plan.wait_s + 20)
        if url is not None:
            _delete_queue(sqs, url)


def _send_all(sqs: Any, url: str, run: ProbeRun, clock: Clock) -> None:
    for i, (at, delay) in enumerate(run.plan.sends()):
        sleep_until(clock, run.started_ms + at)
        sample = run.samples[i]
        sample.send_start_ms = clock.now_ms()
        sqs.send_message(QueueUrl=url, MessageBody=str(i), DelaySeconds=delay)
        sample.send_end_ms = clock.now_ms()


def _receive_all(sqs: Any, url: str, run: ProbeRun, clock: Clock, stop: threading.Event,
                 done: threading.Event) -> None:
    """Receive continuously (the plan's wait and interval), noting each message's first receive;
    ``done`` once every message was received."""
    last: int | None = None
    while not stop.is_set():
        started = clock.now_ms()
        if last is not None:
            run.receive_cycle_ms.append(started - last)
        last = started
        try:
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=RECEIVE_BATCH,
                                           WaitTimeSeconds=run.plan.wait_s,
                                           MessageSystemAttributeNames=TIMESTAMPS).get("Messages", [])
        except Exception:  # noqa: BLE001 - counted; the loop goes on (a second later) until stopped
            run.receive_errors += 1
            stop.wait(1)
            continue
        returned = clock.now_ms()
        for m in messages:
            _note(run.samples[int(m["Body"])], m, returned)
        if all(s.received_ms is not None for s in run.samples):
            done.set()
            return
        sleep_until(clock, started + run.plan.interval_ms)


def _note(sample: Sample, message: dict[str, Any], returned_ms: int) -> None:
    if sample.received_ms is not None:
        return
    attrs = message.get("Attributes", {})
    sample.sent_ms = int(attrs["SentTimestamp"]) if "SentTimestamp" in attrs else None
    first = attrs.get("ApproximateFirstReceiveTimestamp")
    sample.first_receive_ms = int(first) if first is not None else None
    sample.received_ms = returned_ms


def _delete_queue(sqs: Any, url: str) -> None:
    try:
        sqs.delete_queue(QueueUrl=url)
    except Exception:
        print(f"punctual: the probe could not delete its queue; delete it yourself: {url}", file=sys.stderr)
        raise
