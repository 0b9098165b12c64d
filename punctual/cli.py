"""The ``punctual`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="punctual", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the demo (placeholder until the local stack lands)")
    from punctual.bench.run import add_arguments as bench_arguments

    bench_arguments(sub.add_parser("bench", help="benchmark: the real handlers in virtual time vs the alternatives"))
    args = parser.parse_args(argv)
    if args.command == "bench":
        from punctual.bench.run import main as bench_main

        return bench_main(args)
    if args.command == "demo":
        print("punctual demo: the embedded local stack is not built yet (issue 5); nothing to run.")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
