"""The embedded local stack: a moto endpoint on 127.0.0.1 holding the construct's resources,
plus the drivers that make the real handlers run as they would in AWS."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from punctual.core import observability as obs
from punctual.core.clock import iso_ms
from punctual.core.config import META_PK, Settings, load_settings
from punctual.core.models import ATTR_ENQUEUED_MS

from . import motoperf
from .drivers import ASYNC_RETRY_DELAYS_S, Driver, RuleDriver, SnsDriver, SqsDriver, StreamDriver
from .invoke import InvokeError, LocalFunction
from .provision import ACCOUNT, REGION, LocalModel, provision
from .template import load_template

DEFAULT_PORT = 4599
STATE_DIR = Path(".punctual")
LOCAL_JSON = "local.json"
PID_FILE = "local.pid"


class LocalStackError(RuntimeError):
    pass


def aws_env_defaults() -> None:
    """Dummy credentials and the account-id endpoint mode moto's streams need (never real AWS)."""
    for k, v in (("AWS_ACCESS_KEY_ID", "local"), ("AWS_SECRET_ACCESS_KEY", "local"),
                 ("AWS_DEFAULT_REGION", REGION), ("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")):
        os.environ.setdefault(k, v)


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now, bound the way moto's server binds
    (werkzeug's ``allow_reuse_address``: SO_REUSEADDR), so the sockets a stack just stopped leaves in
    TIME-WAIT do not count as in use; a socket listening there does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen(1)
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class LocalOptions:
    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    state_dir: Path = STATE_DIR
    state_file: Path | None = None  # None: nothing persisted
    template: Path | None = None
    cache_dir: Path | None = None  # default: state_dir/cache
    rule_delay_s: float | None = 2.0  # None: anywhere in the minute
    sqs_concurrency: int = 4
    save_every_s: float = 5.0
    props: dict[str, Any] = field(default_factory=dict)  # construct props for the synthesis (JSON values)
    env_overrides: dict[str, str] = field(default_factory=dict)  # applied over every function's template env
    region: str = REGION
    write_files: bool = True  # local.json + pid file in state_dir
    # Lambda's asynchronous retries (the rule's target, a topic's subscriber); tests shorten them
    async_retry_delays_s: tuple[float, ...] = ASYNC_RETRY_DELAYS_S


class LocalStack:
    def __init__(self, options: LocalOptions | None = None, out: Any = print):
        self.opts = options or LocalOptions()
        self.out = out
        self.server: Any = None
        self.model: LocalModel | None = None
        self.functions: dict[str, LocalFunction] = {}
        self.drivers: list[Driver] = []
        self.settings: Settings | None = None
        self.endpoint_url = f"http://{self.opts.host}:{self.opts.port}"
        self._log_file: Any = None
        self._log_lock = threading.Lock()
        self._saver: threading.Thread | None = None
        self._stopping = threading.Event()
        self.restored = 0
        self._wrote_files = False

    # -- logging ------------------------------------------------------------
    def log(self, source: str, message: str) -> None:
        line = json.dumps({"t": iso_ms(int(time.time() * 1000)), "driver": source, "message": message})
        with self._log_lock:
            if self._log_file is not None:
                print(line, file=self._log_file, flush=True)

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> LocalStack:
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> LocalStack:
        import boto3
        from moto.server import ThreadedMotoServer

        o = self.opts
        # the port first, and taken at once: a synthesis (up to ~40 s) never ends in "port in use", and
        # nothing can take the port meanwhile (moto's server would then wait forever for its bind)
        if not port_free(o.host, o.port):
            raise LocalStackError(f"port {o.port} on {o.host} is in use (another local stack? try --port, "
                                  f"or `punctual local down`)")
        aws_env_defaults()
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        motoperf.apply()  # moto's per-message O(queue size) SQS costs (see motoperf)
        motoperf.serialise_dynamodb()  # moto's transactions are not thread-safe (see motoperf)
        self.server = ThreadedMotoServer(ip_address=o.host, port=o.port, verbose=False)
        self.server.start()
        # moto's backends are process-global: start from an empty account (one local stack per process)
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST"),
                               timeout=10).close()
        o.state_dir.mkdir(parents=True, exist_ok=True)
        self._log_file = open(o.state_dir / "local.log", "a", encoding="utf-8")  # noqa: SIM115
        obs.set_stream(self._log_file)
        template = load_template(o.template, o.cache_dir or o.state_dir / "cache", props=o.props, log=self.out)
        clients = {name: boto3.client(name, endpoint_url=self.endpoint_url, region_name=o.region)
                   for name in ("dynamodb", "sqs", "events", "dynamodbstreams", "sns")}
        self.clients = clients
        self.model = provision(template, clients, region=o.region, account=ACCOUNT)
        for spec in self.model.functions.values():
            spec.environment.update(o.env_overrides)
            try:
                self.functions[spec.logical_id] = LocalFunction(spec, self.endpoint_url, o.region)
            except InvokeError as exc:  # e.g. inline code of an example function in cdk.out
                self.out(f"warning: function {spec.name}: {exc}; nothing will invoke it")
        merged: dict[str, str] = {}
        for spec in self.model.functions.values():
            merged.update(spec.environment)
        self.settings = load_settings(merged)
        self._start_drivers()
        if o.state_file is not None:
            self.restored = self._restore(o.state_file)
            self._saver = threading.Thread(target=self._save_loop, name="state-saver", daemon=True)
            self._saver.start()
        if o.write_files:
            (o.state_dir / LOCAL_JSON).write_text(json.dumps(self.describe(), indent=2))
            (o.state_dir / PID_FILE).write_text(str(os.getpid()))
            self._wrote_files = True
        return self

    def destinations(self) -> dict[str, str]:
        """Where an OnFailure destination's ARN sends to: a queue's URL, a topic's ARN."""
        assert self.model is not None
        return {q.arn: q.url for q in self.model.queues.values()} | {t.arn: t.arn for t in self.model.topics.values()}

    def _start_drivers(self) -> None:
        assert self.model is not None
        m, o = self.model, self.opts
        dests = self.destinations()
        sqs, sns = self.clients["sqs"], self.clients["sns"]
        for rule in m.rules.values():
            targets = [self.functions[f.logical_id] for arn in rule.target_arns
                       if (f := m.function_for_arn(arn)) is not None and f.logical_id in self.functions]
            if rule.schedule_expression is not None and targets:
                self.drivers.append(RuleDriver(rule, self.clients["events"], targets, self.log, delay_s=o.rule_delay_s,
                                               retry_delays_s=o.async_retry_delays_s, sqs=sqs,
                                               destinations=dests, sns=sns))
        topics = {t.arn: t for t in m.topics.values()}
        for sub in m.subscriptions.values():
            if sub.function not in self.functions or sub.topic_arn not in topics:
                continue
            self.drivers.append(SnsDriver(sub, topics[sub.topic_arn].name, self.functions[sub.function], sns, sqs,
                                          o.region, self.log, retry_delays_s=o.async_retry_delays_s,
                                          destinations=dests, concurrency=o.sqs_concurrency))
        for mapping in m.mappings.values():
            if not mapping.enabled or mapping.function not in self.functions:
                continue
            fn = self.functions[mapping.function]
            if mapping.kind == "sqs":
                self.drivers.append(SqsDriver(mapping, m.queues[mapping.source], fn, self.clients["sqs"],
                                              o.region, self.log, concurrency=o.sqs_concurrency))
            else:
                self.drivers.append(StreamDriver(mapping, m.tables[mapping.source], fn,
                                                 self.clients["dynamodbstreams"], o.region, self.log, sqs=sqs,
                                                 on_failure_url=dests.get(mapping.on_failure_arn or ""), sns=sns))
        for d in self.drivers:
            d.start()
        for d in self.drivers:
            if isinstance(d, StreamDriver):
                d.ready.wait(10)

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        for d in self.drivers:
            d.stop()
        for d in self.drivers:
            d.join(timeout=30)
        if self.opts.state_file is not None and self.model is not None:
            try:
                self.save_state(self.opts.state_file)
            except Exception as exc:  # the endpoint is still up here; report, don't hide
                self.out(f"warning: could not save state: {exc}")
        if self.server is not None:
            self.server.stop()
        if self._wrote_files:
            for name in (LOCAL_JSON, PID_FILE):
                try:
                    (self.opts.state_dir / name).unlink()
                except FileNotFoundError:
                    pass
        obs.set_stream(None)
        if self._log_file is not None:
            with self._log_lock:
                self._log_file.close()
                self._log_file = None

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- what is where ----------------------------------------------------------
    def queue_roles(self) -> dict[str, str]:
        assert self.model is not None and self.settings is not None
        return queue_roles(self.model, self.settings)

    def describe(self) -> dict[str, Any]:
        assert self.model is not None and self.settings is not None
        s = self.settings
        return {
            "endpoint_url": self.endpoint_url,
            "region": self.opts.region,
            "pid": os.getpid(),
            "table": s.table_name,
            "partition": s.partition_key_value,
            "shards": s.shards,
            "delivery": s.delivery,
            "window_seconds": s.window_seconds,
            "direct_early_margin_ms": s.direct_early_margin_ms,
            "rule": s.rule_name,
            "control_topic": s.control_topic_arn or None,  # direct delivery's poll requests and failure notices
            "queues": self.queue_roles(),
            "functions": {f.name: f.handler for f in self.model.functions.values()},
            "state_file": str(self.opts.state_file) if self.opts.state_file else None,
            "started_at": iso_ms(int(time.time() * 1000)),
        }

    def banner(self) -> str:
        d = self.describe()
        assert self.model is not None
        lines = [
            f"Punctual local stack on {d['endpoint_url']} (region {d['region']}, pid {d['pid']})",
            f"  table      {d['table']} (partition {d['partition']!r}"
            + (f", {d['shards']} shards" if d["shards"] > 1 else "") + ", stream on)",
            f"  rule       {d['rule']} (fires "
            + (f"{self.opts.rule_delay_s:g}s into" if self.opts.rule_delay_s is not None else "anywhere in")
            + " its one-shot cron minute)",
        ]
        lines += [f"  queue      {role:<13} {url}" for role, url in d["queues"].items()]
        for sub in self.model.subscriptions.values():
            fn = self.model.functions.get(sub.function)
            lines.append(f"  topic      {sub.topic_arn.rsplit(':', 1)[-1]} -> {fn.name if fn else sub.function}"
                         + (" (the control topic)" if sub.topic_arn == d["control_topic"] else ""))
        for d_ in self.drivers:
            lines.append(f"  driver     {d_.name}")
        ignored = ", ".join(f"{k if k.startswith('Custom::') else k.split('::')[-1]} ({v})"
                            for k, v in sorted(self.model.ignored.items()))
        if ignored:
            lines.append(f"  no local behaviour: {ignored}")
        if self.opts.state_file:
            lines.append(f"  state      {self.opts.state_file} ({self.restored} rows restored)")
        lines.append(f"  logs       {self.opts.state_dir / 'local.log'}")
        return "\n".join(lines)

    # -- state ------------------------------------------------------------------
    def _scan(self, table: str) -> list[dict[str, Any]]:
        ddb, items, start = self.clients["dynamodb"], [], None
        while True:
            kw: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
            if start:
                kw["ExclusiveStartKey"] = start
            page = ddb.scan(**kw)
            items += page.get("Items", [])
            start = page.get("LastEvaluatedKey")
            if not start:
                return items

    def save_state(self, path: Path) -> int:
        """Every table's items as DynamoDB JSON (binary as base64), written atomically."""
        assert self.model is not None
        import base64

        def enc(v: Any) -> Any:
            if isinstance(v, (bytes, bytearray)):
                return {"__b64__": base64.b64encode(bytes(v)).decode("ascii")}
            if isinstance(v, dict):
                return {k: enc(x) for k, x in v.items()}
            if isinstance(v, list):
                return [enc(x) for x in v]
            return v

        tables = {t.name: [enc(i) for i in self._scan(t.name)] for t in self.model.tables.values()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"saved_at": iso_ms(int(time.time() * 1000)), "tables": tables}))
        tmp.replace(path)
        return sum(len(v) for v in tables.values())

    def _save_loop(self) -> None:
        assert self.opts.state_file is not None
        wait_s = self.opts.save_every_s
        while not self._stopping.wait(wait_s):
            started = time.monotonic()
            try:
                self.save_state(self.opts.state_file)
            except Exception as exc:
                self.log("state", f"save failed: {exc}")
            # a save scans the whole table through moto (CPU shared with everything else):
            # with a large table, save less often so saving takes at most ~10% of the time
            wait_s = max(self.opts.save_every_s, 9 * (time.monotonic() - started))

    def _restore(self, path: Path) -> int:
        """Reload rows saved by :meth:`save_state`.

        Queues are not persisted, so a pointer message sent before the restart is gone: the
        send mark is dropped (the row is new again and is sent afresh). The arming meta row is
        dropped too (the rule is recreated from the template); the restored rows reach the
        editor through the stream like fresh inserts, which re-arms the rule.
        """
        if not path.exists():
            return 0
        import base64

        def dec(v: Any) -> Any:
            if isinstance(v, dict):
                if set(v) == {"__b64__"}:
                    return base64.b64decode(v["__b64__"])
                return {k: dec(x) for k, x in v.items()}
            if isinstance(v, list):
                return [dec(x) for x in v]
            return v

        data = json.loads(path.read_text())
        names = {t.name for t in self.model.tables.values()} if self.model else set()
        count = 0
        ddb = self.clients["dynamodb"]
        for table, items in data.get("tables", {}).items():
            if table not in names:
                self.out(f"warning: state has rows for table {table!r}, which the template no longer defines")
                continue
            for raw in items:
                item = dec(raw)
                if item.get("pk", {}).get("S") == META_PK:
                    continue
                item.pop(ATTR_ENQUEUED_MS, None)
                ddb.put_item(TableName=table, Item=item)
                count += 1
        return count


def queue_roles(model: LocalModel, settings: Settings) -> dict[str, str]:
    """Queue URL by role, as ``local.json`` names them: ``delay``, ``delivery``, ``rejected``, each one's
    redrive DLQ (``<role>_dlq``), ``rule_dlq`` (the rule target's dead-letter queue, the construct's
    ``rule_dead_letter_queue``: with direct delivery also the control topic subscription's, one queue
    under one name in both modes), then every other queue by its name. Direct delivery has no delay queue."""
    s = settings
    roles = {"delay": s.delay_queue_url, "delivery": s.delivery_queue_url, "rejected": s.rejected_queue_url}
    by_arn = {q.arn: q for q in model.queues.values()}
    by_url = {q.url: q for q in model.queues.values()}
    out = {k: v for k, v in roles.items() if v}
    for role, url in list(out.items()):
        q = by_url.get(url)
        if q is not None and q.dlq_arn in by_arn:
            out[f"{role}_dlq"] = by_arn[q.dlq_arn].url
    rule = next((r for r in model.rules.values() if r.name == s.rule_name), None)
    if rule is not None and rule.dlq_arn in by_arn:
        out["rule_dlq"] = by_arn[rule.dlq_arn].url
    named = set(out.values())
    out |= {q.name: q.url for q in model.queues.values() if q.url not in named}
    return out


def read_local_json(state_dir: Path = STATE_DIR) -> dict[str, Any] | None:
    path = state_dir / LOCAL_JSON
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None
