"""The ``punctual`` command: schedule, inspect and watch tasks, run the local stack and the demo.

Works against the local stack (``punctual local up`` writes ``.punctual/local.json``, which
every other command reads) or real AWS (``--table``/env, no endpoint).

Configuration, first found wins:
  endpoint   --endpoint-url, PUNCTUAL_ENDPOINT_URL, .punctual/local.json (else real AWS)
  table      --table, PUNCTUAL_TABLE_NAME, .punctual/local.json
  partition  --partition, PUNCTUAL_PARTITION_KEY_VALUE, .punctual/local.json, "scheduler"
  shards     --shards, PUNCTUAL_SHARDS, .punctual/local.json, 1 (the construct's shards)
  queues     PUNCTUAL_DELIVERY_QUEUE_URL / _DELAY_ / _REJECTED_, .punctual/local.json
Errors are one line on stderr and a non-zero exit (PUNCTUAL_DEBUG=1 shows tracebacks);
`redrive` exits 5 when it left messages on the queue; `probe` (the SQS delay timer, on a queue of its
own) starts against real AWS only with --yes.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import local, monitor, probe, redrive, tasks
from .exits import EXIT_ERROR, EXIT_NOT_FOUND, EXIT_PARTIAL, EXIT_UNREACHABLE, CliError, describe_error
from .target import configured_endpoint

__all__ = ["EXIT_ERROR", "EXIT_NOT_FOUND", "EXIT_PARTIAL", "EXIT_UNREACHABLE", "CliError", "build_parser", "main"]


def _state_option() -> argparse.ArgumentParser:
    """``--state-dir``: every command's (the local stack's files, read by the others)."""
    from punctual.local.stack import STATE_DIR

    state = argparse.ArgumentParser(add_help=False)
    state.add_argument("--state-dir", default=os.environ.get("PUNCTUAL_STATE_DIR", str(STATE_DIR)),
                       help="where `local up` keeps local.json, the pid file, logs and state (default: "
                            f"PUNCTUAL_STATE_DIR, else {STATE_DIR})")
    return state


def _target_options(state: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Where a client command acts (cli/target.py); not for ``local`` and ``demo``, which start their own."""
    common = argparse.ArgumentParser(add_help=False, parents=[state])
    common.add_argument("--endpoint-url", help="AWS endpoint (local stack); default PUNCTUAL_ENDPOINT_URL or "
                                               ".punctual/local.json")
    common.add_argument("--table", help="scheduler table name (default PUNCTUAL_TABLE_NAME or local.json)")
    common.add_argument("--partition", help="partition key value (default 'scheduler')")
    common.add_argument("--shards", type=int, help="the scheduler's shards (the construct's prop; default 1)")
    common.add_argument("--region", help="AWS region")
    return common


def build_parser() -> argparse.ArgumentParser:
    """Every command; each sets ``run``, its handler (``run(args) -> exit code``)."""
    from punctual.bench.run import add_arguments as bench_arguments
    from punctual.bench.run import main as bench_main

    state = _state_option()
    common = _target_options(state)
    parser = argparse.ArgumentParser(prog="punctual", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    tasks.add_commands(sub, common)
    redrive.add_commands(sub, common)
    monitor.add_commands(sub, common)
    local.add_commands(sub, state)
    probe.add_commands(sub, common)
    bench = sub.add_parser("bench", help="benchmark: the real handlers in virtual time vs the alternatives")
    bench_arguments(bench)
    bench.set_defaults(run=bench_main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, never a traceback
        if os.environ.get("PUNCTUAL_DEBUG"):
            raise
        message, code = describe_error(exc, configured_endpoint(args))
        print(f"punctual: error: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
