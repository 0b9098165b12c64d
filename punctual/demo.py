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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from punctual import receiving
from punctual.client import PunctualClient
from punctual.core.clock import SystemClock, iso_ms
from punctual.core.keys import encode_sk
from punctual.errors import AlreadyEnqueued
from punctual.stats import percentile

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


def _watch(sqs: Any, url: str, seen: Seen, stop: threading.Event, out: Any) -> None:
    while not stop.is_set():
        try:
            msgs = receiving.receive(sqs, url)
        except Exception:
            if stop.wait(0.2):
                return
            continue
        now = SystemClock().now_ms()
        for m in msgs:
            try:
                event = json.loads(m["Body"])
            except ValueError:
                event = {"body": m["Body"]}
            with seen.lock:
                seen.events.append((event, now))
            out(event, now)
        receiving.delete(sqs, url, msgs)
        if not msgs and stop.wait(0.02):
            return


def _drain_count(sqs: Any, url: str | None) -> list[dict[str, Any]]:
    if not url:
        return []
    out: list[dict[str, Any]] = []
    while True:
        msgs = receiving.receive(sqs, url)
        if not msgs:
            return out
        out += [json.loads(m["Body"]) for m in msgs]
        receiving.delete(sqs, url, msgs)


def run_demo(args: argparse.Namespace) -> int:
    from .local import LocalOptions, LocalStack
    from .local.stack import free_port

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
        props={**DEMO_PROPS, **getattr(args, "props", {})},
        write_files=False,
    )
    print("punctual demo: the real handlers on an embedded local stack (moto), checked in real time")
    stack = LocalStack(opts, out=lambda m: print(f"  {m}", flush=True))
    stack.start()
    try:
        return _demo(stack, args, tty, started)
    finally:
        stack.stop()


def _mk(path: Path) -> str:
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def _demo(stack: Any, args: argparse.Namespace, tty: bool, started: float) -> int:
    import boto3

    print(stack.banner())
    print(f"  construct props: {stack.opts.props} (so tasks due > 70 s ahead wait for the rule and the poller)")
    roles = stack.queue_roles()
    ddb = boto3.client("dynamodb", endpoint_url=stack.endpoint_url, region_name=stack.opts.region)
    sqs = boto3.client("sqs", endpoint_url=stack.endpoint_url, region_name=stack.opts.region)
    s = stack.settings
    table = s.table_name
    client = PunctualClient(table, s.partition_key_value, shards=s.shards, delivery=s.delivery,
                            window_seconds=s.window_seconds, ddb=ddb, clock=SystemClock())
    seen = Seen()
    stop = threading.Event()
    t0 = SystemClock().now_ms()
    horizon_ms = int(_horizon_s(args.horizon, time.monotonic() - started) * 1000)

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
        item = {"pk": {"S": s.partition_for(task_id)}, "sk": {"S": key}}  # README, "Shards"
        item["payload"] = payload_av or {"M": {k: {"S": str(v)} for k, v in (payload or {}).items()}}
        ddb.put_item(TableName=table, Item=item)
        return key

    expects = _schedule_spread(client, raw, t0, horizon_ms)
    # cancelled: one far from due, one already on the delay queue (fast path) when cancelled; in
    # direct delivery a task is sent when it enters the window: the far ones are due past it
    far_ms = 80_000 if s.direct else 20_000
    c1 = client.schedule(t0 + far_ms, {"kind": "cancel-me"}, id="cancel-early")
    c2 = client.schedule(t0 + 9_000, {"kind": "cancel-me"}, id="cancel-in-flight")
    expects += [Expect(c1.key, t0 + far_ms, "cancelled", False), Expect(c2.key, t0 + 9_000, "cancelled", False)]
    r1 = client.schedule(t0 + (85_000 if s.direct else 45_000), {"kind": "reschedule-me"}, id="resched-earlier")
    r2 = client.schedule(t0 + 6_000, {"kind": "reschedule-me"}, id="resched-later")
    expects += [Expect(r1.key, r1.due_ms, "rescheduled-from", False),
                Expect(r2.key, t0 + 6_000, "rescheduled-from", False)]
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
    for change in (lambda: client.cancel(c1.key), lambda: client.cancel(c2.key),
                   lambda: client.reschedule(r1.key, t0 + 12_000), lambda: client.reschedule(r2.key, t0 + 25_000)):
        expects += _change(change, expects)
    due_list = [e for e in expects if e.deliver]
    print(f"  {len(due_list)} deliveries expected, last due {rel(max(e.due_ms for e in due_list))}", flush=True)

    _wait_for(stack, seen, expects, t0, tty)
    time.sleep(1.0)  # a last look for stragglers and duplicates
    stop.set()
    watcher.join(5)
    if tty:
        print("\r" + " " * 90 + "\r", end="")
    rejected = _drain_count(sqs, roles.get("rejected"))
    dlq = {role: len(_drain_count(sqs, url)) for role, url in roles.items() if role.endswith("_dlq")}
    return _report(stack, expects, bad_keys, seen, rejected, dlq, started)


def _change(change: Callable[[], Any], expects: list[Expect]) -> list[Expect]:
    """Run a cancel or a reschedule; what the demo now expects besides ``expects``: the new task of
    a reschedule, or, when it answered AlreadyEnqueued (direct delivery: sent already), the old
    task delivered after all."""
    try:
        new = change()
    except AlreadyEnqueued as exc:
        print(f"  {exc.key}: AlreadyEnqueued (direct delivery: its event is on the delivery queue already)")
        for e in expects:
            if e.key == exc.key:
                e.deliver, e.how = True, "enqueued"
        return []
    if new.key in {e.key for e in expects}:
        return []  # a cancel returns the task it cancelled
    return [Expect(new.key, new.due_ms, "rescheduled")]


def _horizon_s(horizon_s: float, setup_s: float) -> float:
    """The latest due time, shortened when a cold template cache (synthesis) ate into the 2 minutes."""
    if setup_s <= TARGET_S - 8 - horizon_s:
        return horizon_s
    shorter = max(MIN_HORIZON_S, min(horizon_s, TARGET_S - 8 - setup_s))
    print(f"  set-up took {setup_s:.0f} s (synthesis): horizon {shorter:.0f} s instead of {horizon_s:g} s")
    return shorter


def _schedule_spread(client: PunctualClient, raw: Callable[..., str], t0: int, horizon_ms: int) -> list[Expect]:
    """15 tasks spread over the horizon, raw rows and client calls in turn, and one row past due."""
    expects: list[Expect] = []
    fractions = [0.011, 0.03, 0.06, 0.1, 0.15, 0.22, 0.3, 0.4, 0.5, 0.62, 0.75, 0.82, 0.9, 0.95, 1.0]
    for i, f in enumerate(fractions):
        due = t0 + max(1000, int(horizon_ms * f)) + 137 * i
        if i % 2 == 0:
            key = raw(due, f"raw-{i:02d}", {"kind": "raw", "n": i})
            expects.append(Expect(key, due, "raw"))
        else:
            task = client.schedule(due, {"kind": "client", "n": i}, id=f"client-{i:02d}")
            expects.append(Expect(task.key, due, "client"))
    past = t0 - 30_000
    expects.append(Expect(raw(past, "past-due", {"kind": "past-due"}), past, "past-due"))
    return expects


def _wait_for(stack: Any, seen: Seen, expects: list[Expect], t0: int, tty: bool) -> None:
    """Until every expected delivery came (and the last due time is past) or the grace ran out,
    showing progress (a live line on a terminal, else a line every 10 s)."""
    due_list = [e for e in expects if e.deliver]
    deadline = max(e.due_ms for e in due_list) + GRACE_MS
    last_progress = 0.0
    while SystemClock().now_ms() < deadline:
        with seen.lock:
            got = {ev.get("key") for ev, _ in seen.events}
        if _done(got, due_list, expects):
            break
        text = _progress(stack, got, due_list, t0)
        if tty:
            print("\r" + text.ljust(90), end="", flush=True)
        elif time.monotonic() - last_progress >= 10:
            print(text, flush=True)
            last_progress = time.monotonic()
        time.sleep(0.2)


def _done(got: set[Any], due_list: list[Expect], expects: list[Expect]) -> bool:
    """Every expected delivery came, and every due time (cancelled ones too) is 1.5 s past."""
    return all(e.key in got for e in due_list) and SystemClock().now_ms() > max(e.due_ms for e in expects) + 1500


def _progress(stack: Any, got: set[Any], due_list: list[Expect], t0: int) -> str:
    now = SystemClock().now_ms()
    nxt = min((e.due_ms for e in due_list if e.key not in got), default=None)
    return (f"  [{(now - t0) / 1000:5.1f}s] delivered {len(got & {e.key for e in due_list})}/{len(due_list)}"
            + (f", next due in {(nxt - now) / 1000:5.1f}s" if nxt else "")
            + f", poller fired {_fires(stack)}x")


def _fires(stack: Any) -> int:
    from .local.drivers import RuleDriver

    return sum(d.fire_count for d in stack.drivers if isinstance(d, RuleDriver))


Received = tuple[dict[str, Any], int]  # a delivery event and when the demo received it (epoch ms)


@dataclass
class Outcome:
    """What the demo saw, sorted against what it expected."""

    by_key: dict[str, list[Received]]
    want: list[Expect]  # should be delivered
    not_wanted: list[Expect]  # cancelled or rescheduled away
    delivered: list[Expect]
    lost: list[Expect]
    wrongly: list[Expect]  # delivered although not wanted
    early: list[dict[str, Any]]
    unknown: list[str]  # delivered keys the demo never scheduled


def _partition(items: list[Expect], keep: Callable[[Expect], bool]) -> tuple[list[Expect], list[Expect]]:
    yes: list[Expect] = []
    no: list[Expect] = []
    for item in items:
        (yes if keep(item) else no).append(item)
    return yes, no


def _is_early(event: dict[str, Any], received: int) -> bool:
    due = event.get("due_ms")
    return isinstance(due, int) and (event.get("lateness_ms", 0) < 0 or received < due)


def _by_key(seen: Seen) -> dict[str, list[Received]]:
    by_key: dict[str, list[Received]] = {}
    for ev, received in seen.events:
        by_key.setdefault(str(ev.get("key")), []).append((ev, received))
    return by_key


def _outcome(expects: list[Expect], seen: Seen) -> Outcome:
    by_key = _by_key(seen)
    want, not_wanted = _partition(expects, lambda e: e.deliver)
    delivered, lost = _partition(want, lambda e: e.key in by_key)
    expected = {e.key for e in expects}
    return Outcome(
        by_key, want, not_wanted, delivered, lost,
        wrongly=[e for e in not_wanted if e.key in by_key],
        early=[ev for ev, received in seen.events if _is_early(ev, received)],
        unknown=[k for k in by_key if k not in expected],
    )


def _ms(v: int | None) -> str:
    return f"{v} ms" if v is not None else "-"


def _spread(values: list[int]) -> str:
    """p50 / p99 / max."""
    return f"{_ms(percentile(values, 50))} / {_ms(percentile(values, 99))} / {_ms(max(values) if values else None)}"


def _rejected(bad_keys: list[str], rejected: list[dict[str, Any]]) -> str:
    rejected_keys = {r.get("sk") for r in rejected}
    text = f"{sum(k in rejected_keys for k in bad_keys)} / {len(bad_keys)}"
    codes = sorted({str(r.get("code")) for r in rejected})
    return text + (f"  [{', '.join(codes)}]" if rejected else "")


def _timing_rows(o: Outcome) -> list[tuple[str, str]]:
    """Lateness of the tasks due in the future (the past-due row is late by design)."""
    timely = [o.by_key[e.key][0] for e in o.delivered if e.how != "past-due"]
    late = [ev["lateness_ms"] for ev, _ in timely if isinstance(ev.get("lateness_ms"), int)]
    seen_late = [received - ev["due_ms"] for ev, received in timely]
    return [("lateness p50 / p99 / max", _spread(late)), ("seen by a consumer p50 / p99 / max", _spread(seen_late))]


def _past_due_rows(o: Outcome) -> list[tuple[str, str]]:
    past = [e for e in o.delivered if e.how == "past-due"]
    if not past:
        return []
    ev = o.by_key[past[0].key][0][0]
    return [("past-due row (due -30 s)", f"delivered {ev.get('lateness_ms')} ms after its due time")]


def _stack_rows(stack: Any, dlq: dict[str, int]) -> list[tuple[str, str]]:
    rows = [("dead-letter queues", ", ".join(f"{k} {v}" for k, v in dlq.items()))] if dlq else []
    fn = {f.name: f for f in stack.functions.values()}
    rows.append(("invocations", ", ".join(f"{name} {f.invocations}" + (f" ({f.errors} errors)" if f.errors else "")
                                          for name, f in fn.items())))
    rows.append(("poller fired by the rule", f"{_fires(stack)}x"))
    from .local.drivers import SnsDriver

    sns = [d for d in stack.drivers if isinstance(d, SnsDriver)]
    if sns:  # direct delivery: poll requests and failure notices through the control topic
        rows.append(("control topic messages", ", ".join(f"{d.messages} -> {d.fn.name}" for d in sns)))
    return rows


def _rows(o: Outcome, stack: Any, bad_keys: list[str], rejected: list[dict[str, Any]], dlq: dict[str, int],
          started: float) -> list[tuple[str, str]]:
    rows = [
        ("delivered", f"{len(o.delivered)} / {len(o.want)}"),
        ("early (must be 0)", str(len(o.early))),
        ("lost (must be 0)", str(len(o.lost))),
        ("cancelled/rescheduled-away delivered", f"{len(o.wrongly)} of {len(o.not_wanted)}"),
        ("duplicates (same event id)", str(sum(len(v) - 1 for v in o.by_key.values()))),
        ("rejected (malformed rows)", _rejected(bad_keys, rejected)),
        *_timing_rows(o),
        *_past_due_rows(o),
        *_stack_rows(stack, dlq),
    ]
    if o.unknown:
        rows.append(("unexpected deliveries", ", ".join(o.unknown[:3])))
    rows.append(("demo took", f"{time.monotonic() - started:.1f} s"))
    return rows


def _print_table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print()
    print("  " + "-" * (width + 40))
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    print("  " + "-" * (width + 40))


def _print_failures(o: Outcome) -> bool:
    """Print what went wrong; True if nothing did."""
    for e in o.lost:
        print(f"  LOST {e.key} ({e.how}, due {iso_ms(e.due_ms)})")
    for ev in o.early:
        print(f"  EARLY {ev.get('key')} lateness {ev.get('lateness_ms')} ms")
    for e in o.wrongly:
        print(f"  DELIVERED AFTER {e.how.upper()}: {e.key}")
    return not o.early and not o.lost and not o.wrongly


def _report(stack: Any, expects: list[Expect], bad_keys: list[str], seen: Seen,
            rejected: list[dict[str, Any]], dlq: dict[str, int], started: float) -> int:
    outcome = _outcome(expects, seen)
    _print_table(_rows(outcome, stack, bad_keys, rejected, dlq, started))
    ok = _print_failures(outcome)
    print("  OK: nothing early, nothing lost" if ok else "  FAILED")
    return 0 if ok else 1
