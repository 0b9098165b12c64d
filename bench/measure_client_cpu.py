"""Measure the client CPU of one botocore call, per call type and size, for the benchmark's CPU model.

Run from the repository root (needs boto3; openssl for HTTPS):

    python bench/measure_client_cpu.py                 # ~2,000 calls per case, HTTPS, writes the table
    python bench/measure_client_cpu.py --calls 200 --print-only   # a quick look, writes nothing
    python bench/measure_client_cpu.py --only dynamodb.TransactWriteItems   # one call type, merged in

A child process serves canned AWS responses (the JSON protocols of DynamoDB, SQS and EventBridge)
over HTTPS on 127.0.0.1 with keep-alive, so the client pays what a warm Lambda client pays per call:
parameter validation, serialisation, SigV4 signing, TLS, the HTTP exchange and response parsing.
The server runs in its own process, so ``time.process_time()`` of this one counts the client only.
Each case is timed over ``--calls`` calls after a warm-up; ``base_ms`` and ``per_item_ms`` are the
line through its two sizes (for one size, ``per_item_ms`` is 0).

Writes punctual/bench/client_cpu_table.py, which the simulator reads (punctual/bench/cpu.py): one
vCPU's ms per call; Lambda gives a function memory / 1,769 MB of a vCPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import os
import platform
import pprint
import ssl
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "punctual" / "bench" / "client_cpu_table.py"

# -- what a Punctual call looks like ------------------------------------------------------------
PAYLOAD = {"M": {"order": {"N": "42"}, "customer": {"S": "c-000123"}, "action": {"S": "remind"},
                 "note": {"S": "x" * 60}}}


def row(i: int) -> dict[str, Any]:
    """A task row as the poller and the consumer read it (~250 B)."""
    return {"pk": {"S": "scheduler"}, "sk": {"S": f"1798135200{i:03d}#order-{i:06d}"}, "payload": PAYLOAD,
            "punctual_enqueued_ms": {"N": "1798135100000"}, "punctual_attempt": {"N": "1"}}


def key(i: int) -> dict[str, Any]:
    return {"pk": {"S": "scheduler"}, "sk": {"S": f"1798135200{i:03d}#order-{i:06d}"}}


EVENT_BODY = json.dumps({"event_id": "f2ada993-134e-585e-a7f7-c1aed7535a57", "id": "order-42",
                         "key": "1798135200000#order-42", "due": "2026-12-24T18:00:00.000Z",
                         "due_ms": 1798135200000, "payload": {"order": 42, "action": "remind"},
                         "delivered_at": "2026-12-24T18:00:00.012Z", "delivered_at_ms": 1798135200012,
                         "lateness_ms": 12, "attempt": 1, "publicationTimestamp": 1798135200000})


# -- the canned responses, by X-Amz-Target --------------------------------------------------------
def respond(target: str, request: dict[str, Any]) -> dict[str, Any]:
    op = target.rsplit(".", 1)[-1]
    if op == "Query":
        n = int(request.get("Limit", 1))
        return {"Items": [row(i) for i in range(n)], "Count": n, "ScannedCount": n}
    if op == "GetItem":
        return {"Item": row(0)}
    if op == "BatchGetItem":
        (table, spec), = request["RequestItems"].items()
        return {"Responses": {table: [row(i) for i in range(len(spec["Keys"]))]}, "UnprocessedKeys": {}}
    if op == "BatchWriteItem":
        return {"UnprocessedItems": {}}
    if op == "UpdateItem":
        return {"Attributes": {"punctual_attempt": {"N": "1"}}}
    if op in ("PutItem", "DeleteItem", "TransactWriteItems"):
        return {}
    if op == "SendMessageBatch":
        return {"Successful": [{"Id": e["Id"], "MessageId": f"m-{e['Id']}-0000-0000-000000000000",
                                "MD5OfMessageBody": "0" * 32} for e in request["Entries"]], "Failed": []}
    if op == "DeleteMessageBatch":
        return {"Successful": [{"Id": e["Id"]} for e in request["Entries"]], "Failed": []}
    if op == "DescribeRule":
        return {"Name": "punctual", "Arn": "arn:aws:events:us-east-1:123456789012:rule/punctual",
                "ScheduleExpression": "cron(5 18 24 12 ? 2026)", "State": "ENABLED", "EventBusName": "default"}
    if op == "PutRule":
        return {"RuleArn": "arn:aws:events:us-east-1:123456789012:rule/punctual"}
    return {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: botocore reuses its connection, as a warm Lambda does
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls between the headers and the body

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        target = self.headers.get("X-Amz-Target", "")
        out = json.dumps(respond(target, json.loads(body or b"{}"))).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("x-amzn-RequestId", "00000000-0000-0000-0000-000000000000")
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


def serve(port_out: Any, cert: str | None) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    port_out.put(server.server_address[1])
    server.serve_forever()


def self_signed_cert(folder: str) -> str:
    pem = os.path.join(folder, "localhost.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", pem, "-out", pem], check=True, capture_output=True)
    return pem


# -- the cases: (service, operation, items, call) --------------------------------------------------
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/punctual-delay"


def conditional_delete(i: int) -> dict[str, Any]:
    """One Delete of the consumer's transactions (store.delete_sent): the row while it is the send."""
    return {"Delete": {"TableName": "punctual", "Key": key(i), "ConditionExpression": "#a = :att AND #e <= :enq",
                       "ExpressionAttributeNames": {"#a": "punctual_attempt", "#e": "punctual_enqueued_ms"},
                       "ExpressionAttributeValues": {":att": {"N": "1"}, ":enq": {"N": "1798135100000"}}}}


def cases(ddb: Any, sqs: Any, events: Any) -> list[tuple[str, str, int, Callable[[], Any]]]:
    t = "punctual"
    return [
        ("dynamodb", "UpdateItem", 1, lambda: ddb.update_item(
            TableName=t, Key=key(0), UpdateExpression="SET punctual_attempt = if_not_exists(punctual_attempt, :z) + :one",
            ConditionExpression="attribute_exists(sk)", ExpressionAttributeValues={":z": {"N": "0"}, ":one": {"N": "1"}},
            ReturnValues="UPDATED_NEW")),
        ("dynamodb", "GetItem", 1, lambda: ddb.get_item(TableName=t, Key=key(0), ConsistentRead=True)),
        ("dynamodb", "DeleteItem", 1, lambda: ddb.delete_item(
            TableName=t, Key=key(0), ConditionExpression="attribute_exists(sk)")),
        ("dynamodb", "PutItem", 1, lambda: ddb.put_item(TableName=t, Item=row(0))),
        *[("dynamodb", "Query", n, (lambda n=n: ddb.query(
            TableName=t, KeyConditionExpression="pk = :p AND sk BETWEEN :l AND :u", ConsistentRead=True, Limit=n,
            ExpressionAttributeValues={":p": {"S": "scheduler"}, ":l": {"S": "1798135200000"},
                                       ":u": {"S": "1798135201000"}}))) for n in (1, 100)],
        *[("dynamodb", "BatchGetItem", n, (lambda n=n: ddb.batch_get_item(
            RequestItems={t: {"Keys": [key(i) for i in range(n)], "ConsistentRead": True}}))) for n in (1, 100)],
        *[("dynamodb", "BatchWriteItem", n, (lambda n=n: ddb.batch_write_item(
            RequestItems={t: [{"DeleteRequest": {"Key": key(i)}} for i in range(n)]}))) for n in (1, 25)],
        *[("dynamodb", "TransactWriteItems", n, (lambda n=n: ddb.transact_write_items(
            TransactItems=[conditional_delete(i) for i in range(n)]))) for n in (1, 100)],
        *[("sqs", "SendMessageBatch", n, (lambda n=n: sqs.send_message_batch(
            QueueUrl=QUEUE, Entries=[{"Id": str(i), "MessageBody": EVENT_BODY, "DelaySeconds": 0} for i in range(n)])))
          for n in (1, 10)],
        ("sqs", "DeleteMessageBatch", 10, lambda: sqs.delete_message_batch(
            QueueUrl=QUEUE, Entries=[{"Id": str(i), "ReceiptHandle": "AQEB" + "x" * 300} for i in range(10)])),
        ("events", "DescribeRule", 1, lambda: events.describe_rule(Name="punctual")),
        ("events", "PutRule", 1, lambda: events.put_rule(
            Name="punctual", ScheduleExpression="cron(5 18 24 12 ? 2026)", State="ENABLED")),
    ]


def clients(endpoint: str) -> tuple[Any, Any, Any]:
    """Clients configured as the functions' (punctual.core.runtime.make_clients): botocore's retries off."""
    import boto3
    from botocore.config import Config

    cfg = Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=5, read_timeout=20)
    session = boto3.session.Session(aws_access_key_id="measure", aws_secret_access_key="measure",
                                    region_name="us-east-1")
    make = lambda name: session.client(name, endpoint_url=endpoint, verify=False, config=cfg)  # noqa: E731
    return make("dynamodb"), make("sqs"), make("events")


def cpu_ms_per_call(call: Callable[[], Any], calls: int, warmup: int = 50) -> float:
    for _ in range(warmup):
        call()
    started = time.process_time()
    for _ in range(calls):
        call()
    return (time.process_time() - started) * 1000 / calls


def fit(points: dict[int, float]) -> dict[str, float]:
    """base_ms + per_item_ms x items through the (one or two) measured sizes."""
    (n1, c1), *rest = sorted(points.items())
    if not rest:
        return {"base_ms": round(c1, 4), "per_item_ms": 0.0}
    n2, c2 = rest[-1]
    per = (c2 - c1) / (n2 - n1)
    return {"base_ms": round(c1 - per * n1, 4), "per_item_ms": round(per, 5)}


def measure(calls: int, tls: bool, only: frozenset[str] = frozenset()) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        cert = self_signed_cert(folder) if tls else None
        ports: Any = multiprocessing.Queue()
        server = multiprocessing.Process(target=serve, args=(ports, cert), daemon=True)
        server.start()
        try:
            port = ports.get(timeout=30)
            endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
            points: dict[str, dict[int, float]] = {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # verify=False: urllib3's InsecureRequestWarning per call
                for service, op, n, call in cases(*clients(endpoint)):
                    if only and f"{service}.{op}" not in only:
                        continue
                    ms = cpu_ms_per_call(call, calls)
                    points.setdefault(f"{service}.{op}", {})[n] = round(ms, 4)
                    print(f"{service}.{op} x{n}: {ms:.3f} ms", flush=True)
        finally:
            server.terminate()
            server.join()
    return {"ops": {op: {**fit(p), "measured": p} for op, p in points.items()},
            "conditions": conditions(calls, tls)}


def conditions(calls: int, tls: bool) -> str:
    import botocore

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return (f"{dt.date.today().isoformat()}, {cpu or platform.machine()}, Python {platform.python_version()}, "
            f"botocore {botocore.__version__}, {'HTTPS' if tls else 'HTTP'} keep-alive to a local server in "
            f"another process, {calls} calls per case after 50 of warm-up, time.process_time()")


def merged(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` (some call types) over the table already written: its other entries kept, the
    conditions of each run named."""
    from punctual.bench import client_cpu_table as table

    names = ", ".join(sorted(result["ops"]))
    return {"ops": {**table.OPS, **result["ops"]},
            "conditions": f"{table.CONDITIONS}; {names} measured {result['conditions']}"}


def write_table(result: dict[str, Any]) -> None:
    text = (
        '"""Client CPU of one botocore call at one vCPU, per call type: written by bench/measure_client_cpu.py\n'
        "(rerun it to refresh; do not edit by hand). ``base_ms + per_item_ms x items``; items are what\n"
        'punctual/bench/cpu.py counts for the call (entries, keys, returned rows)."""\n\n'
        f"CONDITIONS = {result['conditions']!r}\n\n"
        f"OPS = {pprint.pformat(result['ops'], width=110, sort_dicts=True)}\n"
    )
    TABLE.write_text(text)
    print(f"written: {TABLE.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=2_000, help="calls per case (default 2,000)")
    p.add_argument("--http", action="store_true", help="plain HTTP instead of HTTPS (no openssl needed)")
    p.add_argument("--print-only", action="store_true", help="print the table, do not write it")
    p.add_argument("--only", action="append", default=[], metavar="SERVICE.OP",
                   help="measure only this call type (repeatable), merged into the table already written")
    args = p.parse_args(argv)
    result = measure(args.calls, tls=not args.http, only=frozenset(args.only))
    if args.only:
        result = merged(result)
    print(json.dumps(result, indent=1))
    if not args.print_only:
        write_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
