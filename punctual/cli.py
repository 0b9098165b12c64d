"""The ``punctual`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="punctual", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="run the demo (placeholder until the local stack lands)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        print("punctual demo: the embedded local stack is not built yet (issue 5); nothing to run.")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
