"""Planning figures of the poller, measured against moto with a virtual clock.

Run from the repository root:  python bench/planning_figures.py [--max-n 10000]

Prints (as Markdown) how many minutes of tasks one poll covers, polls per hour under
steady load and at rest, and AWS requests per task for a poll of N tasks.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.update(
    AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
    AWS_ACCOUNT_ID_ENDPOINT_MODE="disabled",
)
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.pop("AWS_PROFILE", None)

from moto import mock_aws  # noqa: E402

from punctual.core import observability as obs  # noqa: E402
from punctual.core.clock import ManualClock  # noqa: E402
from punctual.core.config import Settings  # noqa: E402
from punctual.core.cron import MINUTE_MS, parse_one_shot_cron  # noqa: E402
from punctual.core.keys import encode_sk, window_upper_key  # noqa: E402
from punctual.core.models import item_key  # noqa: E402
from punctual.core.usecases.poll import poll  # noqa: E402
from tests.faults import Faults  # noqa: E402
from tests.support import T0_MS, make_stack  # noqa: E402

H = 3_600_000


class CountingSqs:
    """Counts SendMessageBatch calls and accepts every entry (moto's SQS is O(n^2) in queue size)."""

    def __init__(self, real):
        self.real = real
        self.calls: Counter[str] = Counter()
        self.messages = 0

    def __getattr__(self, name):
        return getattr(self.real, name)

    def send_message_batch(self, QueueUrl, Entries):  # noqa: N803
        self.calls["SendMessageBatch"] += 1
        self.messages += len(Entries)
        return {"Successful": [{"Id": e["Id"], "MessageId": "m", "MD5OfMessageBody": ""} for e in Entries]}

    def send_message(self, **kw):
        self.calls["SendMessage"] += 1
        return self.real.send_message(**kw)


def put_rows(stack, dues: list[int], pad: int = 480) -> None:
    p, table = stack.settings.partition_key_value, stack.settings.table_name
    for i in range(0, len(dues), 25):
        stack.ddb.batch_write_item(RequestItems={table: [
            {"PutRequest": {"Item": {"pk": {"S": p}, "sk": {"S": encode_sk(d, f"t{i + j:06}")},
                                     "payload": {"M": {"pad": {"S": "x" * pad}}}}}}
            for j, d in enumerate(dues[i : i + 25])]})


def consume_due(stack, now: int) -> None:
    """The consumer: rows whose due time has passed were delivered and deleted."""
    upper = window_upper_key(now)
    for item in stack.rows():
        if item["sk"]["S"] < upper:
            stack.ddb.delete_item(TableName=stack.settings.table_name, Key=item_key(item))


def armed_minute(stack) -> int | None:
    rule = stack.rule()
    return None if rule["State"] == "DISABLED" else parse_one_shot_cron(rule["ScheduleExpression"])


def steady_load(fire_offset_ms: int, every_s: int = 5, hours: int = 3) -> dict:
    """Tasks every ``every_s`` seconds; the rule fires ``fire_offset_ms`` into its minute."""
    clock = ManualClock(T0_MS)
    with mock_aws():
        stack = make_stack(clock=clock)
        stack.deps.sqs = CountingSqs(stack.sqs)
        put_rows(stack, [T0_MS + i * every_s * 1000 for i in range(hours * 3600 // every_s)], pad=16)
        starts, ends = [], []
        report = poll(stack.deps)
        starts.append(clock.now_ms()), ends.append(report.window_end_ms)
        while True:
            minute = armed_minute(stack)
            if minute is None:
                break
            clock.set(minute + fire_offset_ms)
            consume_due(stack, clock.now_ms())
            report = poll(stack.deps)
            starts.append(minute + fire_offset_ms), ends.append(report.window_end_ms)
        # the middle hour: fully loaded, away from the start and the tail
        mid = [s for s in starts if T0_MS + H <= s < T0_MS + 2 * H]
        covered = [(b - a) / MINUTE_MS for a, b in zip(ends, ends[1:], strict=False)
                   if T0_MS + H <= a < T0_MS + 2 * H]
        tail = [s for s in starts if s >= T0_MS + hours * H]
        return {"polls_in_hour": len(mid), "covered_min": min(covered), "covered_max": max(covered),
                "covered_avg": sum(covered) / len(covered), "tail_polls": len(tail),
                "disabled_after_last": armed_minute(stack) is None}


def isolated_task() -> int:
    """Polls caused by one task due in 2 hours (rule armed by the editor for it)."""
    clock = ManualClock(T0_MS)
    with mock_aws():
        stack = make_stack(clock=clock)
        put_rows(stack, [T0_MS + 2 * H + 30_000])
        polls = 0
        clock.set(T0_MS + 2 * H - 3 * MINUTE_MS + 30_000)  # the editor armed minute_not_after(due - lead)
        while True:
            consume_due(stack, clock.now_ms())  # delivered on time, then deleted by the consumer
            poll(stack.deps)
            polls += 1
            minute = armed_minute(stack)
            if minute is None:
                return polls
            clock.set(minute + 30_000)


def requests_for(n: int, workers: int) -> dict:
    clock = ManualClock(T0_MS)
    with mock_aws():
        stack = make_stack(clock=clock)
        stack.deps.settings = dataclasses.replace(stack.deps.settings, send_workers=workers)
        put_rows(stack, [T0_MS + (i * 900_000) // n for i in range(n)])
        put_rows(stack, [T0_MS + 2 * H])  # one row after the window: the poll arms for it
        sqs = CountingSqs(stack.sqs)
        stack.deps.sqs = sqs
        faults = Faults(stack.ddb, stack.events)
        report = poll(stack.deps)
        assert report.sent == n == sqs.messages, (report, sqs.messages)
        calls = Counter(c.split(":", 1)[1] for c in faults.calls) + sqs.calls
        return dict(calls)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-n", type=int, default=10_000)
    args = ap.parse_args()
    obs.set_stream(open(os.devnull, "w"))  # noqa: SIM115

    s = Settings()
    print(f"Settings: window {s.window_seconds} s, lead {s.lead_seconds} s, "
          f"orphan grace {s.orphan_grace_seconds} s, max attempts {s.max_attempts}\n")

    print("## Coverage and polls per hour (steady load: one task every 5 s for 3 h)\n")
    print("| rule fires at | polls in the middle hour | minutes of tasks per poll (min / avg / max) |")
    print("| --- | --- | --- |")
    for offset in (0, 30_000, 59_000):
        r = steady_load(offset)
        print(f"| :{offset // 1000:02d} s into its minute | {r['polls_in_hour']} | "
              f"{r['covered_min']:.1f} / {r['covered_avg']:.1f} / {r['covered_max']:.1f} |")
    print(f"\nAfter the last task: {r['tail_polls']} poll(s), then the rule is "
          f"{'DISABLED' if r['disabled_after_last'] else 'still armed'}: 0 polls per hour at rest.")
    print(f"An isolated task (nothing else pending) costs {isolated_task()} polls "
          "(the one that sends it, then the orphan check that finds it delivered and disables the rule).\n")

    print("## AWS requests for one poll of N tasks due in its window\n")
    ops = ["Query", "GetItem", "UpdateItem", "SendMessageBatch", "PutRule", "DisableRule"]
    print("| N | " + " | ".join(ops) + " | total | per task |")
    print("| --- | " + " | ".join("---" for _ in ops) + " | --- | --- |")
    for n in (10, 1_000, 10_000):
        if n > args.max_n:
            continue
        calls = requests_for(n, workers=1)
        total = sum(calls.values())
        print(f"| {n:,} | " + " | ".join(str(calls.get(op, 0)) for op in ops) + f" | {total} | {total / n:.2f} |")
    extra = set(calls) - set(ops)
    if extra:
        print(f"\n(other calls: {sorted(extra)})")


if __name__ == "__main__":
    main()
