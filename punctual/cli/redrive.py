"""``punctual redrive``: put the rows of the rejected-rows queue back as fresh rows (the client's
:meth:`~punctual.client.PunctualClient.redrive`), one line per message."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from punctual.client import RedriveLeft, RedriveReport, ScheduledTask
from punctual.core.clock import iso_ms

from .exits import EXIT_PARTIAL
from .target import resolve_target


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("redrive", parents=[common],
                       help="put rejected rows back as fresh rows (from the rejected-rows queue)")
    p.add_argument("--limit", type=_positive, help="read at most N messages (default: all)")
    p.add_argument("--code", dest="codes", action="append", metavar="CODE",
                   help="only rejections with this reason code (repeatable), e.g. undeliverable")
    p.add_argument("--queue-url", help="the rejected-rows queue (default PUNCTUAL_REJECTED_QUEUE_URL or local.json)")
    p.add_argument("--wait", type=_wait, default=1, metavar="SECONDS",
                   help="long polling of each receive, 0..20 (default 1)")
    p.set_defaults(run=cmd_redrive)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _wait(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 20:  # SQS's WaitTimeSeconds
        raise argparse.ArgumentTypeError(f"must be 0..20, got {value}")
    return value


def cmd_redrive(args: argparse.Namespace) -> int:
    """Exit 0 when every message read was redriven (or skipped by --code), else EXIT_PARTIAL."""
    target = resolve_target(args)
    url = args.queue_url or target.need_queue("rejected")
    report = target.client().redrive(url, limit=args.limit, codes=args.codes, wait_seconds=args.wait)
    for line in report_lines(report):
        print(line)
    print(summary(report), file=sys.stderr)
    return EXIT_PARTIAL if report.problems else 0


def report_lines(report: RedriveReport) -> list[str]:
    return [_redriven(t) for t in report.redriven] + [_left(x) for x in report.left]


def _redriven(task: ScheduledTask) -> str:
    return f"redriven  {task.key}  due {iso_ms(task.due_ms)}"


def _left(left: RedriveLeft) -> str:
    was = f" (rejected as {left.code})" if left.code else ""
    return f"left      {left.key or 'message ' + left.message_id}  {left.why}: {left.detail}{was}"


def summary(report: RedriveReport) -> str:
    skipped = len(report.left) - len(report.problems)
    text = f"({len(report.redriven)} redriven, {len(report.problems)} left on the queue"
    return text + (f", {skipped} skipped by --code)" if skipped else ")")
