"""``punctual watch | status``: deliveries as they arrive, and what the system holds and waits for."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

from punctual import receiving
from punctual.client import PunctualClient
from punctual.core.arming import read_arm
from punctual.core.clock import SystemClock, iso_ms
from punctual.core.cron import parse_one_shot_cron

from .target import Target, resolve_target

DEPTHS = {"visible": "ApproximateNumberOfMessages", "in_flight": "ApproximateNumberOfMessagesNotVisible",
          "delayed": "ApproximateNumberOfMessagesDelayed"}


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("watch", parents=[common], help="tail (and consume) the delivery queue")
    p.add_argument("--count", type=int, default=0, help="stop after N deliveries")
    p.add_argument("--timeout", type=float, default=0, help="stop after S seconds")
    p.set_defaults(run=cmd_watch)
    p = sub.add_parser("status", parents=[common], help="armed time, pending rows, queue depths, rejections")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_status)


# -- watch ------------------------------------------------------------------------------------


def format_delivery(event: dict[str, Any], received_ms: int) -> str:
    due = event.get("due_ms")
    lateness = event.get("lateness_ms")
    seen = f"seen +{received_ms - due} ms" if isinstance(due, int) else ""
    late = f"late {lateness:+d} ms" if isinstance(lateness, int) else "late ?"
    return (f"{event.get('delivered_at', '?')}  {event.get('key', event.get('id', '?'))}  {late}  {seen}  "
            f"attempt {event.get('attempt', '?')}  id {event.get('event_id', event.get('id', '?'))}")


def _event(body: str) -> dict[str, Any]:
    try:
        return dict(json.loads(body))
    except ValueError:
        return {"key": body[:80]}


def _batches(sqs: Any, url: str, want: int, deadline: float | None) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """Received batches and when they came; each is deleted once the caller is done with it.
    Stops after ``want`` messages (0: no limit) or at ``deadline`` (monotonic; None: never)."""
    count = 0
    while deadline is None or time.monotonic() < deadline:
        wait = 1 if deadline is None else max(0, min(1, int(deadline - time.monotonic())))
        messages = receiving.receive(sqs, url, min(10, want - count) if want else 10, wait)
        yield messages, SystemClock().now_ms()
        receiving.delete(sqs, url, messages)
        if not messages and wait == 0:
            time.sleep(0.05)
        count += len(messages)
        if want and count >= want:
            return


def cmd_watch(args: argparse.Namespace) -> int:
    target = resolve_target(args)
    sqs = target.clients()["sqs"]
    url = target.need_queue("delivery")
    sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])  # reachable? exists?
    print(f"watching {url} (deliveries are consumed; Ctrl-C to stop)", file=sys.stderr)
    count = 0
    try:
        for messages, received in _batches(sqs, url, args.count, time.monotonic() + args.timeout if args.timeout
                                           else None):
            for m in messages:
                print(format_delivery(_event(m["Body"]), received), flush=True)
            count += len(messages)
    except KeyboardInterrupt:
        pass
    print(f"({count} deliveries)", file=sys.stderr)
    return 0


# -- status -----------------------------------------------------------------------------------


def collect_status(target: Target) -> dict[str, Any]:
    client = target.client()
    out: dict[str, Any] = {"endpoint": target.endpoint_url or "AWS", "table": client.table_name,
                           "partition": target.partition, "shards": target.shards, **_arm(client)}
    out["pending"] = client.count()
    out["in_flight"] = client.count(in_flight=True)
    first = next(client.list(limit=1, page_size=1), None)
    if first:
        out["next_key"] = first.key
    if target.rule:
        out["rule"] = _rule(target.clients()["events"], target.rule)
    out["queues"] = depths = _depths(target.clients()["sqs"], target.queues)
    if "rejected" in depths:
        out["rejected_rows"] = depths["rejected"]["visible"] + depths["rejected"]["in_flight"]
    return out


def _arm(client: PunctualClient) -> dict[str, Any]:
    """The minute the rule is armed for (the meta row's), and how far ahead it is."""
    now = client.clock.now_ms()
    armed = read_arm(client.ddb, client.settings, client.clock).armed_ms
    if armed is None:
        return {"armed": None, "armed_in_s": None}
    return {"armed": iso_ms(armed), "armed_in_s": round((armed - now) / 1000, 1)}


def _rule(events: Any, name: str) -> dict[str, Any]:
    rule = events.describe_rule(Name=name)
    expr = rule.get("ScheduleExpression")
    fires = None
    if rule.get("State") == "ENABLED" and expr:
        try:
            fires = iso_ms(parse_one_shot_cron(expr))
        except ValueError:
            fires = None
    return {"name": name, "state": rule.get("State"), "expression": expr, "minute": fires}


def _depths(sqs: Any, queues: dict[str, str]) -> dict[str, dict[str, int]]:
    out = {}
    for role, url in queues.items():
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(DEPTHS.values()))["Attributes"]
        out[role] = {name: int(attrs.get(attr, 0)) for name, attr in DEPTHS.items()}
    return out


def cmd_status(args: argparse.Namespace) -> int:
    st = collect_status(resolve_target(args))
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print("\n".join(status_lines(st)))
    return 0


def status_lines(st: dict[str, Any]) -> list[str]:
    lines = [f"endpoint   {st['endpoint']}", f"table      {st['table']} (partition {st['partition']!r}"
             + (f", {st['shards']} shards" if st["shards"] > 1 else "") + ")"]
    if st["armed"]:
        lines.append(f"armed      {st['armed']} (in {st['armed_in_s']:+.1f} s)")
    else:
        lines.append("armed      no (idle: nothing waits for the rule)")
    if "rule" in st:
        r = st["rule"]
        lines.append(f"rule       {r['name']} {r['state']} {r['expression']}")
    lines.append(f"pending    {st['pending']} rows ({st['in_flight']} in flight)"
                 + (f", next {st['next_key']}" if st.get("next_key") else ""))
    lines += [f"queue      {role:<13} visible {d['visible']:>5}  in flight {d['in_flight']:>5}  "
              f"delayed {d['delayed']:>5}" for role, d in st["queues"].items()]
    if "rejected_rows" in st:
        lines.append(f"rejected   {st['rejected_rows']} rows")
    return lines
