"""``punctual schedule | get | list | cancel | reschedule``: the Python client, from the shell."""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from typing import Any

from punctual.client import PunctualClient, ScheduledTask
from punctual.core.clock import SystemClock, iso_ms
from punctual.core.keys import InvalidKey, decode_sk
from punctual.core.wire import dumps
from punctual.timeparse import parse_at_ms, resolve_due_ms

from .exits import EXIT_NOT_FOUND, CliError
from .target import resolve_target


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("schedule", parents=[common], help="schedule a task")
    _when(p)
    p.add_argument("--payload", metavar="JSON|@FILE|-",
                   help="JSON object delivered with the task (default {}); @FILE reads it from a file, - from "
                        "stdin (a payload over the shell's 128 KiB argument limit)")
    p.add_argument("--id", help="task id (default: generated)")
    p.set_defaults(run=cmd_schedule)
    p = sub.add_parser("get", parents=[common], help="show a pending task (by key, or every task with an id)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("key", nargs="?", metavar="KEY", help="the task's key (<ms>#<id>); a bare id as --id")
    g.add_argument("--id", dest="task_id", metavar="ID", help="every pending task with this id, earliest first")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(run=cmd_get)
    p = sub.add_parser("list", parents=[common], help="list scheduled tasks")
    p.add_argument("--from", dest="start", metavar="TIME", help="only tasks due at or after TIME")
    p.add_argument("--to", dest="end", metavar="TIME", help="only tasks due before TIME")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(run=cmd_list)
    p = sub.add_parser("cancel", parents=[common], help="cancel a task (by key or id)")
    p.add_argument("key", metavar="KEY", help="the task's key (<ms>#<id>) or its id")
    p.set_defaults(run=cmd_cancel)
    p = sub.add_parser("reschedule", parents=[common], help="move a task to another time")
    p.add_argument("key", metavar="KEY", help="the task's key (<ms>#<id>) or its id")
    _when(p)
    p.set_defaults(run=cmd_reschedule)


def _when(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--in", dest="in_", metavar="DURATION", help="due in: 30s, 5m, 1h30m, 2d, 250ms")
    g.add_argument("--at", metavar="TIME", help="due at: 2026-12-24T18:00:00Z (zone required) or epoch ms")


def parse_payload(text: str | None) -> dict[str, Any]:
    """``--payload``: JSON text, ``@FILE`` (the file's JSON) or ``-`` (stdin's); ``{}`` when absent."""
    if text is None:
        return {}
    source, text = _payload_text(text)
    try:
        value = json.loads(text, parse_float=Decimal)  # every digit of a number reaches the row
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}" if exc.lineno > 1 else f"character {exc.pos}"
        raise CliError(f"bad --payload{source}: not JSON ({exc.msg} at {where})") from None
    if not isinstance(value, dict):
        raise CliError(f"bad --payload{source}: must be a JSON object, got {type(value).__name__}")
    return value


def _payload_text(arg: str) -> tuple[str, str]:
    """(`` @FILE`` / `` -`` / ``""`` for the messages, the JSON text) of a ``--payload`` argument."""
    if arg == "-":
        return " -", sys.stdin.read()
    if not arg.startswith("@"):
        return "", arg
    path = arg[1:]
    try:
        with open(path, encoding="utf-8") as f:
            return f" {arg}", f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise CliError(f"bad --payload {arg}: cannot read {path!r}: {reason}") from None


def find_key(client: PunctualClient, key_or_id: str) -> str:
    """A full sort key as is; a bare id is looked up in the partition (:meth:`PunctualClient.find`)."""
    try:
        decode_sk(key_or_id)
        return key_or_id
    except InvalidKey:
        pass
    matches = [task.key for task in client.find(key_or_id)]
    if not matches:
        raise CliError(f"no scheduled task with key or id {key_or_id!r} (already delivered or cancelled?)",
                       EXIT_NOT_FOUND)
    if len(matches) > 1:
        raise CliError(f"id {key_or_id!r} matches {len(matches)} tasks; give the full key: " + ", ".join(matches[:3]))
    return matches[0]


def cmd_schedule(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    due = resolve_due_ms(args.in_, args.at, SystemClock().now_ms())
    payload = parse_payload(args.payload)
    task = target.client().schedule(due, payload, id=args.id)
    print(f"scheduled {task.key}  due {iso_ms(due)}")
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    client = resolve_target(args).client()
    key, task_id = args.key, args.task_id
    if key is not None:
        try:
            decode_sk(key)
        except InvalidKey:
            key, task_id = None, key  # a bare id, as cancel and reschedule take it
    if key is not None:
        print(_task_line(client.get(key), args.json))
        return 0
    tasks = client.find(task_id)
    if not tasks:
        raise CliError(f"no scheduled task with id {task_id!r} (already delivered or cancelled?)", EXIT_NOT_FOUND)
    for task in tasks:
        print(_task_line(task, args.json))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    start = parse_at_ms(args.start) if args.start else None
    end = parse_at_ms(args.end) if args.end else None
    count = 0
    for task in target.client().list(start, end):
        print(_task_line(task, args.json))
        count += 1
        if args.limit and count >= args.limit:
            break
    if not args.json:
        print(f"({count} task{'s' if count != 1 else ''})", file=sys.stderr)
    return 0


def _task_line(task: ScheduledTask, as_json: bool) -> str:
    """One task; the payload in the wire's JSON, so its numbers keep every digit."""
    if as_json:
        return dumps({"key": task.key, "due": iso_ms(task.due_ms), "payload": task.payload})
    return f"{task.key}  {iso_ms(task.due_ms)}  {dumps(task.payload)}"


def cmd_cancel(args: argparse.Namespace) -> int:
    client = resolve_target(args).client()
    key = find_key(client, args.key)
    client.cancel(key)
    print(f"cancelled {key}")
    return 0


def cmd_reschedule(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    due = resolve_due_ms(args.in_, args.at, SystemClock().now_ms())
    client = target.client()
    key = find_key(client, args.key)
    task = client.reschedule(key, due)
    print(f"rescheduled {key} -> {task.key}  due {iso_ms(due)}")
    return 0
