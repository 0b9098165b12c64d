"""``punctual local up | down`` (the embedded local stack) and ``punctual demo`` (the demo on one)."""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from .exits import CliError


def add_commands(sub: Any, state: argparse.ArgumentParser) -> None:
    """``state``: the ``--state-dir`` option; these commands start (or stop) their own stack, so the
    client commands' target options (--endpoint-url, --table, ...) are not theirs."""
    from punctual.local.stack import DEFAULT_PORT

    p = sub.add_parser("local", help="the embedded local stack")
    lsub = p.add_subparsers(dest="local_command", required=True)
    up = lsub.add_parser("up", parents=[state], help="start it (foreground; Ctrl-C stops it)",
                         description="Start the embedded local stack in the foreground (Ctrl-C or "
                                     "`punctual local down` stops it); docs/local.md.")
    up.add_argument("--port", type=int, default=int(os.environ.get("PUNCTUAL_LOCAL_PORT", DEFAULT_PORT)),
                    help=f"port of the local endpoint on 127.0.0.1 (default: PUNCTUAL_LOCAL_PORT, else {DEFAULT_PORT})")
    up.add_argument("--template", help="use this synthesized template instead of synthesizing the construct")
    up.add_argument("--cache-dir", help="template cache (default <state-dir>/cache)")
    up.add_argument("--state", help="state file (default <state-dir>/state.json)")
    up.add_argument("--no-state", action="store_true", help="keep nothing across restarts")
    up.add_argument("--rule-delay", type=_rule_delay, default=2.0, metavar="SECONDS|random",
                    help="seconds into its minute the rule fires (default 2); 'random': anywhere in the "
                         "minute, as EventBridge may")
    up.add_argument("--prop", action="append", metavar="NAME=VALUE",
                    help="a Scheduler construct prop for the synthesis, VALUE as JSON (repeatable), "
                         "e.g. --prop window=300 (a Duration prop: seconds or ISO-8601 such as PT5M)")
    up.add_argument("--env", action="append", metavar="NAME=VALUE",
                    help="override a function environment variable of the template (repeatable)")
    up.set_defaults(run=cmd_local_up)
    down = lsub.add_parser("down", parents=[state], help="stop the stack started by `local up`")
    down.add_argument("--timeout", type=float, default=30,
                      help="seconds to wait for it to stop (default %(default)g)")
    down.set_defaults(run=cmd_local_down)

    p = sub.add_parser("demo", parents=[state], help="run the end-to-end demo on an embedded local stack")
    p.add_argument("--port", type=int, default=0, help="port of the demo's local stack (default: a free one)")
    p.add_argument("--horizon", type=float, default=90, help="latest due time, seconds ahead (default 90)")
    p.add_argument("--template", help="use this synthesized template instead of synthesizing the construct")
    p.add_argument("--prop", action="append", metavar="NAME=VALUE",
                   help="a Scheduler construct prop besides the demo's own (as for `local up`), "
                        "e.g. --prop delivery=direct")
    p.set_defaults(run=cmd_demo)


def _rule_delay(text: str) -> float | None:
    if text == "random":
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of seconds (0-59) or 'random'") from None
    if not 0 <= value < 60:
        raise argparse.ArgumentTypeError("must be within the minute: 0 <= SECONDS < 60")
    return value


def _parse_env_overrides(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise CliError(f"bad --env {pair!r}: use NAME=VALUE")
        out[k] = v
    return out


def _parse_props(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs or []:
        k, sep, v = pair.partition("=")
        if not sep or not k.isidentifier():
            raise CliError(f"bad --prop {pair!r}: use NAME=VALUE (VALUE as JSON, e.g. window=300)")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def _read_pid(pid_file: Path) -> int | None:
    """The pid a ``local up`` wrote (None: unreadable)."""
    try:
        return int(pid_file.read_text().strip())
    except ValueError:
        return None


def _refuse_a_second_stack(state_dir: Path) -> None:
    from punctual.local.stack import PID_FILE

    pid_file = state_dir / PID_FILE
    other = _read_pid(pid_file) if pid_file.exists() else None
    if other and other != os.getpid() and _alive(other):
        raise CliError(f"a local stack is already running from {state_dir} (pid {other}): "
                       f"`punctual local down` first, or use another --state-dir")


def _require_local_extra(command: str) -> None:
    """The local stack runs moto's server: without the [local] extra, say so before anything starts."""
    from punctual.extras import missing_message

    message = missing_message(f"punctual {command}", ["moto"])
    if message:
        raise CliError(message)


def cmd_local_up(args: argparse.Namespace) -> int:
    _require_local_extra("local up")
    from punctual.local import LocalOptions, LocalStack

    state_dir = Path(args.state_dir)
    _refuse_a_second_stack(state_dir)
    opts = LocalOptions(
        port=args.port,
        state_dir=state_dir,
        state_file=None if args.no_state else Path(args.state or state_dir / "state.json"),
        template=Path(args.template) if args.template else None,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        rule_delay_s=args.rule_delay,
        props=_parse_props(args.prop),
        env_overrides=_parse_env_overrides(args.env),
    )
    _serve(LocalStack(opts))
    return 0


def _serve(stack: Any) -> None:
    """Run the stack in the foreground until SIGTERM or Ctrl-C, then stop it."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 <pid>` prints every thread's stack (a stuck stack?)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    stack.start()  # a failure here has already cleaned up what it started
    try:
        print(stack.banner(), flush=True)
        print(f"ready: export PUNCTUAL_ENDPOINT_URL={stack.endpoint_url}  (Ctrl-C or `punctual local down` to stop)",
              flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        print("stopping...", flush=True)
        stack.stop()
        state_file = stack.opts.state_file
        print("stopped" + (f" (state saved to {state_file})" if state_file else ""), flush=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # an exited child not yet reaped by its parent is a zombie: stopped
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def cmd_local_down(args: argparse.Namespace) -> int:
    from punctual.local.stack import LOCAL_JSON, PID_FILE

    state_dir = Path(args.state_dir)
    pid_file = state_dir / PID_FILE
    if not pid_file.exists():
        raise CliError(f"no local stack running (no {pid_file})")
    pid = _read_pid(pid_file)
    if pid is None:
        raise CliError(f"unreadable pid file {pid_file}")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        for name in (PID_FILE, LOCAL_JSON):
            (state_dir / name).unlink(missing_ok=True)
        print(f"local stack (pid {pid}) was not running; removed its stale files")
        return 0
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            print(f"local stack (pid {pid}) stopped")
            return 0
        time.sleep(0.1)
    raise CliError(f"local stack (pid {pid}) did not stop within {args.timeout:g} s")


def cmd_demo(args: argparse.Namespace) -> int:
    _require_local_extra("demo")
    from punctual.demo import run_demo

    args.props = _parse_props(args.prop)
    return run_demo(args)
