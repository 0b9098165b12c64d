"""``punctual demo``: the real system on one machine, checked as it runs.

Starts the embedded local stack in-process, schedules a mix of tasks (raw PutItem rows in the
cdk-scheduler format and client calls; due 1-90 s ahead, one past due, cancelled and
rescheduled ones, malformed rows), shows deliveries as they happen, and ends with a table.
Exit 0 only if nothing was early or lost (and no cancelled task was delivered).

The demo synthesizes the construct with ``window=70 s, lead=10 s`` (printed at
start): with the default 15-minute window every task of a 90-second demo would take the
editor's fast path, and the rule and the poller would never be seen.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from punctual.client import task_key
from punctual.core.clock import SystemClock, iso_ms
from punctual.core.keys import encode_sk

DEMO_PROPS = {"window": 70, "lead": 10}  # seconds (punctual.local.template.construct_kwargs)
GRACE_MS = 6_000  # how late a delivery may come before the demo calls it lost
TARGET_S = 118  # the whole demo, set-up included
MIN_HORIZON_S = 75  # keeps tasks beyond the 70 s window (the rule and poller path)


@dataclass
class Expect:
    key: str
    due_ms: int
    how: str  # "raw" | "client" | "past-due" | "rescheduled"
    deliver: bool = True


@dataclass
class Seen:
    events: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def percentile(values: list[int], p: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def _watch(sqs: Any, url: str, seen: Seen, stop: threading.Event, out: Any) -> None:
    while not stop.is_set():
        try:
            resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        except Exception:
            if stop.wait(0.2):
                return
            continue
        now = SystemClock().now_ms()
        msgs = resp.get("Messages", [])
        for m in msgs:
            try:
                event = json.loads(m["Body"])
            except ValueError:
                event = {"body": m["Body"]}
            with seen.lock:
                seen.events.append((event, now))
            out(event, now)
        if msgs:
            sqs.delete_message_batch(QueueUrl=url, Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])
        elif stop.wait(0.02):
            return


def _drain_count(sqs: Any, url: str | None) -> list[dict[str, Any]]:
    if not url:
        return []
    out: list[dict[str, Any]] = []
    while True:
        msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
        if not msgs:
            return out
        out += [json.loads(m["Body"]) for m in msgs]
        sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(msgs)])


def run_demo(args: argparse.Namespace) -> int:
    from .cli import CliError
    from .local import LocalOptions, LocalStack
    from .local.stack import free_port

    try:
        from punctual.client import PunctualClient
    except ImportError as exc:
        raise CliError(f"the editor client is not available yet: {exc}") from exc

    tty = sys.stdout.isatty()
    started = time.monotonic()
    state_dir = Path(args.state_dir)
    demo_dir = Path(tempfile.mkdtemp(prefix="demo-", dir=_mk(state_dir)))
    opts = LocalOptions(
        port=args.port or free_port(),
        state_dir=demo_dir,
        state_file=None,
        template=Path(args.template) if args.template else None,
        cache_dir=state_dir / "cache",
        props=dict(DEMO_PROPS),
        write_files=False,
    )
    print("punctual demo: the real handlers on an embedded local stack (moto), checked in real time")
    stack = LocalStack(opts, out=lambda m: print(f"  {m}", flush=True))
    stack.start()
    try:
        return _demo(stack, PunctualClient, args, tty, started)
    finally:
        stack.stop()


def _mk(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _demo(stack: Any, client_cls: Any, args: argparse.Namespace, tty: bool, started: float) -> int:
    import boto3

    print(stack.banner())
    print(f"  construct props: {DEMO_PROPS} (so tasks due > 70 s ahead wait for the rule and the poller)")
    roles = stack.queue_roles()
    ddb = boto3.client("dynamodb", endpoint_url=stack.endpoint_url, region_name=stack.opts.region)
    sqs = boto3.client("sqs", endpoint_url=stack.endpoint_url, region_name=stack.opts.region)
    table, partition = stack.settings.table_name, stack.settings.partition_key_value
    client = client_cls(table, partition, ddb=ddb, clock=SystemClock())
    seen = Seen()
    stop = threading.Event()
    t0 = SystemClock().now_ms()
    setup_s = time.monotonic() - started
    horizon_s = args.horizon
    if setup_s > TARGET_S - 8 - args.horizon:  # a cold template cache (synthesis) ate into the 2 minutes
        horizon_s = max(MIN_HORIZON_S, min(args.horizon, TARGET_S - 8 - setup_s))
        print(f"  set-up took {setup_s:.0f} s (synthesis): horizon {horizon_s:.0f} s instead of {args.horizon:g} s")
    horizon_ms = int(horizon_s * 1000)

    def rel(ms: int) -> str:
        return f"{(ms - t0) / 1000:+7.2f}s"

    def on_delivery(event: dict[str, Any], received: int) -> None:
        line = (f"  {rel(received)}  delivered {event.get('key', '?'):<34} late {event.get('lateness_ms', '?'):>5} ms"
                f"  (seen {received - event.get('due_ms', received):>4} ms after due)")
        print(("\r" + " " * 100 + "\r" if tty else "") + line, flush=True)

    watcher = threading.Thread(target=_watch, args=(sqs, roles["delivery"], seen, stop, on_delivery), daemon=True)
    watcher.start()

    def raw(due_ms: int, task_id: str, payload: dict[str, Any] | None = None, sk: str | None = None,
            payload_av: dict[str, Any] | None = None) -> str:
        """A row exactly as cdk-scheduler producers write it (DynamoDB JSON, PutItem)."""
        key = sk or encode_sk(due_ms, task_id)
        item = {"pk": {"S": partition}, "sk": {"S": key}}
        item["payload"] = payload_av or {"M": {k: {"S": str(v)} for k, v in (payload or {}).items()}}
        ddb.put_item(TableName=table, Item=item)
        return key

    expects: list[Expect] = []
    fractions = [0.011, 0.03, 0.06, 0.1, 0.15, 0.22, 0.3, 0.4, 0.5, 0.62, 0.75, 0.82, 0.9, 0.95, 1.0]
    for i, f in enumerate(fractions):
        due = t0 + max(1000, int(horizon_ms * f)) + 137 * i
        if i % 2 == 0:
            key = raw(due, f"raw-{i:02d}", {"kind": "raw", "n": i})
            expects.append(Expect(key, due, "raw"))
        else:
            task = client.schedule(due, {"kind": "client", "n": i}, id=f"client-{i:02d}")
            expects.append(Expect(task_key(task), due, "client"))
    past = t0 - 30_000
    expects.append(Expect(raw(past, "past-due", {"kind": "past-due"}), past, "past-due"))
    # cancelled: one far from due, one already on the delay queue (fast path) when cancelled
    c1 = client.schedule(t0 + 20_000, {"kind": "cancel-me"}, id="cancel-early")
    c2 = client.schedule(t0 + 9_000, {"kind": "cancel-me"}, id="cancel-in-flight")
    expects += [Expect(task_key(c1), t0 + 20_000, "cancelled", False), Expect(task_key(c2), t0 + 9_000, "cancelled", False)]
    r1 = client.schedule(t0 + 45_000, {"kind": "reschedule-me"}, id="resched-earlier")
    r2 = client.schedule(t0 + 6_000, {"kind": "reschedule-me"}, id="resched-later")
    expects += [Expect(task_key(r1), t0 + 45_000, "rescheduled-from", False),
                Expect(task_key(r2), t0 + 6_000, "rescheduled-from", False)]
    bad_keys = [
        raw(0, "", sk=f"{t0 // 1000 + 5}#seconds-not-ms"),
        raw(0, "", sk=encode_sk(t0 + 4_000, "payload-not-a-map"), payload_av={"S": "not a map"}),
    ]
    n_planned = len(expects) + len(bad_keys)
    print(f"  scheduled {n_planned} rows at {iso_ms(t0)}: "
          f"{sum(e.how == 'raw' for e in expects) + 1 + len(bad_keys)} raw PutItem (1 past due, {len(bad_keys)} "
          f"malformed), {sum(e.how in ('client', 'cancelled', 'rescheduled-from') for e in expects)} client calls; "
          f"cancelling 2 and rescheduling 2 in 2 s", flush=True)
    time.sleep(2.0)  # let the fast path push c2 and r2 to the delay queue first
    client.cancel(task_key(c1))
    client.cancel(task_key(c2))
    n1 = client.reschedule(task_key(r1), t0 + 12_000)
    n2 = client.reschedule(task_key(r2), t0 + 25_000)
    expects += [Expect(task_key(n1), t0 + 12_000, "rescheduled"), Expect(task_key(n2), t0 + 25_000, "rescheduled")]
    due_list = [e for e in expects if e.deliver]
    print(f"  {len(due_list)} deliveries expected, last due {rel(max(e.due_ms for e in due_list))}", flush=True)

    deadline = max(e.due_ms for e in due_list) + GRACE_MS
    last_progress = 0.0
    while SystemClock().now_ms() < deadline:
        with seen.lock:
            got = {ev.get("key") for ev, _ in seen.events}
        if all(e.key in got for e in due_list) and SystemClock().now_ms() > max(e.due_ms for e in expects) + 1500:
            break
        now = SystemClock().now_ms()
        pending = [e for e in due_list if e.key not in got]
        nxt = min((e.due_ms for e in pending), default=None)
        text = (f"  [{(now - t0) / 1000:5.1f}s] delivered {len(got & {e.key for e in due_list})}/{len(due_list)}"
                + (f", next due in {(nxt - now) / 1000:5.1f}s" if nxt else "")
                + f", poller fired {_fires(stack)}x")
        if tty:
            print("\r" + text.ljust(90), end="", flush=True)
        elif time.monotonic() - last_progress >= 10:
            print(text, flush=True)
            last_progress = time.monotonic()
        time.sleep(0.2)
    time.sleep(1.0)  # a last look for stragglers and duplicates
    stop.set()
    watcher.join(5)
    if tty:
        print("\r" + " " * 90 + "\r", end="")
    rejected = _drain_count(sqs, roles.get("rejected"))
    dlq = {role: len(_drain_count(sqs, url)) for role, url in roles.items() if role.endswith("_dlq")}
    return _report(stack, t0, expects, bad_keys, seen, rejected, dlq, started)


def _fires(stack: Any) -> int:
    from .local.drivers import RuleDriver

    return sum(d.fire_count for d in stack.drivers if isinstance(d, RuleDriver))


def _report(stack: Any, t0: int, expects: list[Expect], bad_keys: list[str], seen: Seen,
            rejected: list[dict[str, Any]], dlq: dict[str, int], started: float) -> int:
    by_key: dict[str, list[tuple[dict[str, Any], int]]] = {}
    for ev, received in seen.events:
        by_key.setdefault(str(ev.get("key")), []).append((ev, received))
    want = [e for e in expects if e.deliver]
    not_wanted = [e for e in expects if not e.deliver]
    delivered = [e for e in want if e.key in by_key]
    lost = [e for e in want if e.key not in by_key]
    early = [ev for ev, received in seen.events
             if isinstance(ev.get("due_ms"), int) and (ev.get("lateness_ms", 0) < 0 or received < ev["due_ms"])]
    wrongly = [e for e in not_wanted if e.key in by_key]
    unknown = [k for k in by_key if k not in {e.key for e in expects}]
    dups = sum(len(v) - 1 for v in by_key.values())
    timely = [by_key[e.key][0] for e in delivered if e.how != "past-due"]
    late = [ev["lateness_ms"] for ev, _ in timely if isinstance(ev.get("lateness_ms"), int)]
    seen_late = [received - ev["due_ms"] for ev, received in timely]
    past = [e for e in delivered if e.how == "past-due"]
    rejected_keys = {r.get("sk") for r in rejected}
    bad_rejected = [k for k in bad_keys if k in rejected_keys]

    def ms(v: int | None) -> str:
        return f"{v} ms" if v is not None else "-"

    rows = [
        ("delivered", f"{len(delivered)} / {len(want)}"),
        ("early (must be 0)", str(len(early))),
        ("lost (must be 0)", str(len(lost))),
        ("cancelled/rescheduled-away delivered", f"{len(wrongly)} of {len(not_wanted)}"),
        ("duplicates (same event id)", str(dups)),
        ("rejected (malformed rows)", f"{len(bad_rejected)} / {len(bad_keys)}"
         + (f"  [{', '.join(sorted({str(r.get('code')) for r in rejected}))}]" if rejected else "")),
        ("lateness p50 / p99 / max", f"{ms(percentile(late, 50))} / {ms(percentile(late, 99))} / "
                                     f"{ms(max(late) if late else None)}"),
        ("seen by a consumer p50 / p99 / max", f"{ms(percentile(seen_late, 50))} / {ms(percentile(seen_late, 99))} / "
                                               f"{ms(max(seen_late) if seen_late else None)}"),
    ]
    if past:
        ev = by_key[past[0].key][0][0]
        rows.append(("past-due row (due -30 s)", f"delivered {ev.get('lateness_ms')} ms after its due time"))
    if dlq:
        rows.append(("dead-letter queues", ", ".join(f"{k} {v}" for k, v in dlq.items())))
    fn = {f.name: f for f in stack.functions.values()}
    rows.append(("invocations", ", ".join(f"{name} {f.invocations}" + (f" ({f.errors} errors)" if f.errors else "")
                                          for name, f in fn.items())))
    rows.append(("poller fired by the rule", f"{_fires(stack)}x"))
    if unknown:
        rows.append(("unexpected deliveries", ", ".join(unknown[:3])))
    rows.append(("demo took", f"{time.monotonic() - started:.1f} s"))
    width = max(len(k) for k, _ in rows)
    print()
    print("  " + "-" * (width + 40))
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    print("  " + "-" * (width + 40))
    for e in lost:
        print(f"  LOST {e.key} ({e.how}, due {iso_ms(e.due_ms)})")
    for ev in early:
        print(f"  EARLY {ev.get('key')} lateness {ev.get('lateness_ms')} ms")
    for e in wrongly:
        print(f"  DELIVERED AFTER {e.how.upper()}: {e.key}")
    ok = not early and not lost and not wrongly
    print("  OK: nothing early, nothing lost" if ok else "  FAILED")
    return 0 if ok else 1
