"""The ``punctual`` command: schedule, inspect and watch tasks, run the local stack and the demo.

Works against the local stack (``punctual local up`` writes ``.punctual/local.json``, which
every other command reads) or real AWS (``--table``/env, no endpoint).

Configuration, first found wins:
  endpoint   --endpoint-url, PUNCTUAL_ENDPOINT_URL, .punctual/local.json (else real AWS)
  table      --table, PUNCTUAL_TABLE_NAME, .punctual/local.json
  partition  --partition, PUNCTUAL_PARTITION_KEY_VALUE, .punctual/local.json, "scheduler"
  queues     PUNCTUAL_DELIVERY_QUEUE_URL / _DELAY_ / _REJECTED_, .punctual/local.json
Errors are one line on stderr and a non-zero exit (PUNCTUAL_DEBUG=1 shows tracebacks).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from punctual.core.clock import SystemClock, iso_ms
from punctual.core.config import ENV, META_ARM_SK, META_PK
from punctual.core.cron import parse_one_shot_cron
from punctual.core.keys import InvalidKey, decode_sk

from .timeparse import TimeSpecError, parse_at_ms, resolve_due_ms

EXIT_ERROR = 1
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


# -- configuration ---------------------------------------------------------------------------


@dataclass
class Target:
    endpoint_url: str | None
    region: str
    table: str | None
    partition: str
    queues: dict[str, str] = field(default_factory=dict)
    rule: str | None = None
    source: str = "flags/env"

    def need_table(self) -> str:
        if not self.table:
            raise CliError("no table: pass --table, set PUNCTUAL_TABLE_NAME, or start `punctual local up`")
        return self.table

    def need_queue(self, role: str) -> str:
        url = self.queues.get(role)
        if not url:
            env = ENV.get(f"{role}_queue_url", f"PUNCTUAL_{role.upper()}_QUEUE_URL")
            raise CliError(f"no {role} queue: set {env} or start `punctual local up`")
        return url

    def is_local(self) -> bool:
        host = urlparse(self.endpoint_url or "").hostname or ""
        return host in ("127.0.0.1", "localhost", "::1")

    def clients(self) -> dict[str, Any]:
        import boto3
        from botocore.config import Config

        if self.is_local():
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
            os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
        cfg = Config(connect_timeout=2, read_timeout=15, retries={"mode": "standard", "max_attempts": 2})
        kw: dict[str, Any] = {"region_name": self.region, "config": cfg}
        if self.endpoint_url:
            kw["endpoint_url"] = self.endpoint_url
        return {n: boto3.client(n, **kw) for n in ("dynamodb", "sqs", "events")}


def resolve_target(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Target:
    from .local.stack import read_local_json

    env = os.environ if environ is None else environ
    local = read_local_json(Path(args.state_dir)) or {}
    endpoint = args.endpoint_url or env.get("PUNCTUAL_ENDPOINT_URL") or local.get("endpoint_url")
    use_local = bool(local) and endpoint == local.get("endpoint_url")
    queues = dict(local.get("queues", {})) if use_local else {}
    for role in ("delay", "delivery", "rejected"):
        if env.get(ENV[f"{role}_queue_url"]):
            queues[role] = env[ENV[f"{role}_queue_url"]]
    return Target(
        endpoint_url=endpoint,
        region=args.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or local.get("region")
        or "us-east-1",
        table=args.table or env.get(ENV["table_name"]) or (local.get("table") if use_local else None),
        partition=args.partition or env.get(ENV["partition_key_value"])
        or (local.get("partition") if use_local else None) or "scheduler",
        queues=queues,
        rule=env.get(ENV["rule_name"]) or (local.get("rule") if use_local else None),
        source=str(Path(args.state_dir) / "local.json") if use_local else "flags/env",
    )


def _editor() -> Any:
    from punctual import client as editor

    return editor


def _client(target: Target) -> Any:
    editor = _editor()
    return editor.PunctualClient(
        target.need_table(), target.partition, ddb=target.clients()["dynamodb"], clock=SystemClock()
    )


def parse_payload(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"bad --payload: not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, dict):
        raise CliError(f"bad --payload: must be a JSON object, got {type(value).__name__}")
    return value


def _field(obj: Any, *names: str) -> Any:
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


# -- commands ----------------------------------------------------------------------------------


def _find_key(target: Target, key_or_id: str) -> str:
    """A full sort key as is; a bare id is looked up in the partition (a filtered query)."""
    try:
        decode_sk(key_or_id)
        return key_or_id
    except InvalidKey:
        pass
    ddb = target.clients()["dynamodb"]
    start, matches = None, []
    while True:
        kw: dict[str, Any] = {
            "TableName": target.need_table(),
            "KeyConditionExpression": "pk = :p",
            "FilterExpression": "contains(sk, :id)",
            "ExpressionAttributeValues": {":p": {"S": target.partition}, ":id": {"S": "#" + key_or_id}},
            "ProjectionExpression": "sk",
            "ConsistentRead": True,
        }
        if start:
            kw["ExclusiveStartKey"] = start
        page = ddb.query(**kw)
        matches += [i["sk"]["S"] for i in page.get("Items", []) if i["sk"]["S"].endswith("#" + key_or_id)]
        start = page.get("LastEvaluatedKey")
        if not start:
            break
    if not matches:
        raise CliError(f"no scheduled task with key or id {key_or_id!r} (already delivered or cancelled?)",
                       EXIT_NOT_FOUND)
    if len(matches) > 1:
        raise CliError(f"id {key_or_id!r} matches {len(matches)} tasks; give the full key: " + ", ".join(matches[:3]))
    return matches[0]


def cmd_schedule(args: argparse.Namespace, target: Target) -> int:
    due = resolve_due_ms(args.in_, args.at, SystemClock().now_ms())
    payload = parse_payload(args.payload)
    result = _client(target).schedule(due, payload, id=args.id)
    key = _editor().task_key(result)
    print(f"scheduled {key}  due {iso_ms(due)}")
    return 0


def cmd_list(args: argparse.Namespace, target: Target) -> int:
    start = parse_at_ms(args.start) if args.start else None
    end = parse_at_ms(args.end) if args.end else None
    count = 0
    for task in _client(target).list(start, end):
        key = _editor().task_key(task)
        due = _field(task, "due_ms")
        payload = _field(task, "payload")
        if args.json:
            print(json.dumps({"key": key, "due": iso_ms(int(due)) if due is not None else None, "payload": payload},
                             default=str))
        else:
            print(f"{key}  {iso_ms(int(due)) if due is not None else '?'}  {json.dumps(payload, default=str)}")
        count += 1
        if args.limit and count >= args.limit:
            break
    if not args.json:
        print(f"({count} task{'s' if count != 1 else ''})", file=sys.stderr)
    return 0


def cmd_cancel(args: argparse.Namespace, target: Target) -> int:
    key = _find_key(target, args.key)
    _client(target).cancel(key)
    print(f"cancelled {key}")
    return 0


def cmd_reschedule(args: argparse.Namespace, target: Target) -> int:
    due = resolve_due_ms(args.in_, args.at, SystemClock().now_ms())
    key = _find_key(target, args.key)
    result = _client(target).reschedule(key, due)
    print(f"rescheduled {key} -> {_editor().task_key(result)}  due {iso_ms(due)}")
    return 0


def format_delivery(event: dict[str, Any], received_ms: int) -> str:
    due = event.get("due_ms")
    lateness = event.get("lateness_ms")
    seen = f"seen +{received_ms - due} ms" if isinstance(due, int) else ""
    late = f"late {lateness:+d} ms" if isinstance(lateness, int) else "late ?"
    return (f"{event.get('delivered_at', '?')}  {event.get('key', event.get('id', '?'))}  {late}  {seen}  "
            f"attempt {event.get('attempt', '?')}  id {event.get('event_id', event.get('id', '?'))}")


def cmd_watch(args: argparse.Namespace, target: Target) -> int:
    sqs = target.clients()["sqs"]
    url = target.need_queue("delivery")
    sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])  # reachable? exists?
    print(f"watching {url} (deliveries are consumed; Ctrl-C to stop)", file=sys.stderr)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    count = 0
    try:
        while deadline is None or time.monotonic() < deadline:
            want = min(10, args.count - count) if args.count else 10
            wait = 1 if deadline is None else max(0, min(1, int(deadline - time.monotonic())))
            messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=want,
                                           WaitTimeSeconds=wait).get("Messages", [])
            received = SystemClock().now_ms()
            for m in messages:
                try:
                    event = json.loads(m["Body"])
                except ValueError:
                    event = {"key": m["Body"][:80]}
                print(format_delivery(event, received), flush=True)
            if messages:
                sqs.delete_message_batch(QueueUrl=url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
            elif wait == 0:
                time.sleep(0.05)
            count += len(messages)
            if args.count and count >= args.count:
                break
    except KeyboardInterrupt:
        pass
    print(f"({count} deliveries)", file=sys.stderr)
    return 0


def _count(ddb: Any, table: str, partition: str, filt: str | None = None) -> int:
    total, start = 0, None
    while True:
        kw: dict[str, Any] = {"TableName": table, "KeyConditionExpression": "pk = :p", "Select": "COUNT",
                              "ExpressionAttributeValues": {":p": {"S": partition}}}
        if filt:
            kw["FilterExpression"] = filt
        if start:
            kw["ExclusiveStartKey"] = start
        page = ddb.query(**kw)
        total += page.get("Count", 0)
        start = page.get("LastEvaluatedKey")
        if not start:
            return total


def collect_status(target: Target) -> dict[str, Any]:
    c = target.clients()
    ddb, sqs = c["dynamodb"], c["sqs"]
    table = target.need_table()
    now = SystemClock().now_ms()
    meta = ddb.get_item(TableName=table, Key={"pk": {"S": META_PK}, "sk": {"S": META_ARM_SK}},
                        ConsistentRead=True).get("Item") or {}
    armed = int(meta["armed_ms"]["N"]) if "armed_ms" in meta else None
    out: dict[str, Any] = {
        "endpoint": target.endpoint_url or "AWS",
        "table": table,
        "partition": target.partition,
        "armed": iso_ms(armed) if armed is not None else None,
        "armed_in_s": round((armed - now) / 1000, 1) if armed is not None else None,
        "pending": _count(ddb, table, target.partition),
        "in_flight": _count(ddb, table, target.partition, "attribute_exists(punctual_enqueued_ms)"),
    }
    first = ddb.query(TableName=table, KeyConditionExpression="pk = :p", Limit=1,
                      ExpressionAttributeValues={":p": {"S": target.partition}}).get("Items", [])
    if first:
        out["next_key"] = first[0]["sk"]["S"]
    if target.rule:
        rule = c["events"].describe_rule(Name=target.rule)
        expr = rule.get("ScheduleExpression")
        fires = None
        if rule.get("State") == "ENABLED" and expr:
            try:
                fires = iso_ms(parse_one_shot_cron(expr))
            except ValueError:
                fires = None
        out["rule"] = {"name": target.rule, "state": rule.get("State"), "expression": expr, "minute": fires}
    depths = {}
    for role, url in target.queues.items():
        a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed"])["Attributes"]
        depths[role] = {"visible": int(a.get("ApproximateNumberOfMessages", 0)),
                        "in_flight": int(a.get("ApproximateNumberOfMessagesNotVisible", 0)),
                        "delayed": int(a.get("ApproximateNumberOfMessagesDelayed", 0))}
    out["queues"] = depths
    if "rejected" in depths:
        out["rejected_rows"] = depths["rejected"]["visible"] + depths["rejected"]["in_flight"]
    return out


def cmd_status(args: argparse.Namespace, target: Target) -> int:
    st = collect_status(target)
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"endpoint   {st['endpoint']}")
    print(f"table      {st['table']} (partition {st['partition']!r})")
    if st["armed"]:
        print(f"armed      {st['armed']} (in {st['armed_in_s']:+.1f} s)")
    else:
        print("armed      no (idle: nothing waits for the rule)")
    if "rule" in st:
        r = st["rule"]
        print(f"rule       {r['name']} {r['state']} {r['expression']}")
    print(f"pending    {st['pending']} rows ({st['in_flight']} in flight)"
          + (f", next {st['next_key']}" if st.get("next_key") else ""))
    for role, d in st["queues"].items():
        print(f"queue      {role:<13} visible {d['visible']:>5}  in flight {d['in_flight']:>5}  "
              f"delayed {d['delayed']:>5}")
    if "rejected_rows" in st:
        print(f"rejected   {st['rejected_rows']} rows")
    return 0


# -- local stack --------------------------------------------------------------------------------


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


def cmd_local_up(args: argparse.Namespace) -> int:
    from .local import LocalOptions, LocalStack
    from .local.stack import PID_FILE

    state_dir = Path(args.state_dir)
    pid_file = state_dir / PID_FILE
    if pid_file.exists():
        try:
            other = int(pid_file.read_text().strip())
        except ValueError:
            other = 0
        if other and other != os.getpid() and _alive(other):
            raise CliError(f"a local stack is already running from {state_dir} (pid {other}): "
                           f"`punctual local down` first, or use another --state-dir")
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
    stack = LocalStack(opts)
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
        print("stopped" + (f" (state saved to {opts.state_file})" if opts.state_file else ""), flush=True)
    return 0


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
    from .local.stack import LOCAL_JSON, PID_FILE

    state_dir = Path(args.state_dir)
    pid_file = state_dir / PID_FILE
    if not pid_file.exists():
        raise CliError(f"no local stack running (no {pid_file})")
    try:
        pid = int(pid_file.read_text().strip())
    except ValueError:
        raise CliError(f"unreadable pid file {pid_file}") from None
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


# -- parser -----------------------------------------------------------------------------------


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


def build_parser() -> argparse.ArgumentParser:
    from .local.stack import DEFAULT_PORT

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--endpoint-url", help="AWS endpoint (local stack); default PUNCTUAL_ENDPOINT_URL or "
                                               ".punctual/local.json")
    common.add_argument("--table", help="scheduler table name (default PUNCTUAL_TABLE_NAME or local.json)")
    common.add_argument("--partition", help="partition key value (default 'scheduler')")
    common.add_argument("--region", help="AWS region")
    common.add_argument("--state-dir", default=os.environ.get("PUNCTUAL_STATE_DIR", ".punctual"),
                        help="where `local up` keeps local.json, the pid file, logs and state (default .punctual)")

    parser = argparse.ArgumentParser(prog="punctual", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def when(p: argparse.ArgumentParser) -> None:
        g = p.add_mutually_exclusive_group(required=True)
        g.add_argument("--in", dest="in_", metavar="DURATION", help="due in: 30s, 5m, 1h30m, 2d, 250ms")
        g.add_argument("--at", metavar="TIME", help="due at: 2026-12-24T18:00:00Z (zone required) or epoch ms")

    p = sub.add_parser("schedule", parents=[common], help="schedule a task")
    when(p)
    p.add_argument("--payload", help="JSON object delivered with the task (default {})")
    p.add_argument("--id", help="task id (default: generated)")
    p = sub.add_parser("list", parents=[common], help="list scheduled tasks")
    p.add_argument("--from", dest="start", metavar="TIME", help="only tasks due at or after TIME")
    p.add_argument("--to", dest="end", metavar="TIME", help="only tasks due before TIME")
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p = sub.add_parser("cancel", parents=[common], help="cancel a task (by key or id)")
    p.add_argument("key", metavar="KEY", help="the task's key (<ms>#<id>) or its id")
    p = sub.add_parser("reschedule", parents=[common], help="move a task to another time")
    p.add_argument("key", metavar="KEY", help="the task's key (<ms>#<id>) or its id")
    when(p)
    p = sub.add_parser("watch", parents=[common], help="tail (and consume) the delivery queue")
    p.add_argument("--count", type=int, default=0, help="stop after N deliveries")
    p.add_argument("--timeout", type=float, default=0, help="stop after S seconds")
    p = sub.add_parser("status", parents=[common], help="armed time, pending rows, queue depths, rejections")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("local", help="the embedded local stack")
    lsub = p.add_subparsers(dest="local_command", required=True)
    up = lsub.add_parser("up", parents=[common], help="start it (foreground; Ctrl-C stops it)")
    up.add_argument("--port", type=int, default=int(os.environ.get("PUNCTUAL_LOCAL_PORT", DEFAULT_PORT)))
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
    down = lsub.add_parser("down", parents=[common], help="stop the stack started by `local up`")
    down.add_argument("--timeout", type=float, default=30)

    p = sub.add_parser("demo", parents=[common], help="run the end-to-end demo on an embedded local stack")
    p.add_argument("--port", type=int, default=0, help="port of the demo's local stack (default: a free one)")
    p.add_argument("--horizon", type=float, default=90, help="latest due time, seconds ahead (default 90)")
    p.add_argument("--template", help="use this synthesized template instead of synthesizing the construct")

    from .bench.run import add_arguments as bench_arguments

    bench_arguments(sub.add_parser("bench", help="benchmark: the real handlers in virtual time vs the alternatives"))
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command == "local":
        return cmd_local_up(args) if args.local_command == "up" else cmd_local_down(args)
    if args.command == "bench":
        from .bench.run import main as bench_main

        return bench_main(args)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    target = resolve_target(args)
    handlers = {
        "schedule": cmd_schedule,
        "list": cmd_list,
        "cancel": cmd_cancel,
        "reschedule": cmd_reschedule,
        "watch": cmd_watch,
        "status": cmd_status,
    }
    return handlers[args.command](args, target)


def describe_error(exc: BaseException, endpoint: str | None = None) -> tuple[str, int]:
    """One line for any failure, and the exit code."""
    if isinstance(exc, CliError):
        return str(exc), exc.code
    if isinstance(exc, TimeSpecError):
        return str(exc), EXIT_ERROR
    from .local.provision import TemplateUnsupported
    from .local.stack import LocalStackError
    from .local.template import TemplateError

    if isinstance(exc, (TemplateError, LocalStackError, TemplateUnsupported)):
        return str(exc), EXIT_ERROR
    try:
        from botocore.exceptions import (
            ClientError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            NoRegionError,
        )
    except ImportError:  # pragma: no cover
        ClientError = ConnectTimeoutError = EndpointConnectionError = NoCredentialsError = NoRegionError = ()
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        where = endpoint or "AWS"
        hint = " (is `punctual local up` running?)" if endpoint else ""
        return f"cannot reach {where}{hint}", EXIT_UNREACHABLE
    if isinstance(exc, NoCredentialsError):
        return "no AWS credentials (for the local stack pass --endpoint-url or run `punctual local up`)", EXIT_ERROR
    if isinstance(exc, NoRegionError):
        return "no AWS region: pass --region or set AWS_REGION", EXIT_ERROR
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = err.get("Code", "?")
        if code in ("ResourceNotFoundException", "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
            return f"not found: {err.get('Message', code)} (wrong --table/--endpoint-url?)", EXIT_NOT_FOUND
        return f"AWS error {code}: {err.get('Message', '')}".strip(), EXIT_ERROR
    try:
        editor = _editor()
        if isinstance(exc, getattr(editor, "NotFound", ())):
            return f"not found: {exc}", EXIT_NOT_FOUND
        if isinstance(exc, getattr(editor, "AlreadyDelivered", ())):
            return f"already delivered: {exc}", EXIT_NOT_FOUND
        if isinstance(exc, getattr(editor, "InvalidSchedule", ())):
            return f"invalid schedule: {exc}", EXIT_ERROR
    except CliError:
        pass
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__, EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, never a traceback
        if os.environ.get("PUNCTUAL_DEBUG"):
            raise
        endpoint = getattr(args, "endpoint_url", None) or os.environ.get("PUNCTUAL_ENDPOINT_URL")
        if endpoint is None:
            try:
                endpoint = resolve_target(args).endpoint_url
            except Exception:
                endpoint = None
        message, code = describe_error(exc, endpoint)
        print(f"punctual: error: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
