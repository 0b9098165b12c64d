"""Where a command acts: endpoint, region, table, partition, shards, queues and rule, first found wins
(flags, then the environment, then ``.punctual/local.json`` written by ``punctual local up``)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from punctual.client import PunctualClient
from punctual.core.clock import SystemClock
from punctual.core.config import ENV, Settings
from punctual.core.shards import MAX_SHARDS

from .exits import CliError

QUEUE_ROLES = ("delay", "delivery", "rejected")


@dataclass
class Target:
    endpoint_url: str | None
    region: str
    table: str | None
    partition: str
    queues: dict[str, str] = field(default_factory=dict)
    rule: str | None = None
    source: str = "flags/env"
    shards: int = 1
    # the deployment's delivery mode and window: which error names a task taken out after its send
    delivery: str = "consumer"
    window_seconds: int = 900
    # direct delivery's early margin (Settings.direct_early_margin_ms): `punctual probe` says whether it
    # covers the early tail it measures
    direct_early_margin_ms: int = Settings.direct_early_margin_ms
    _clients: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

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
        """boto3 clients for DynamoDB, SQS and EventBridge on this endpoint (made once)."""
        if not self._clients:
            self._clients.update(self._make_clients())
        return self._clients

    def _make_clients(self) -> dict[str, Any]:
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

    def client(self) -> PunctualClient:
        """The Python client on this target's table and partition."""
        return PunctualClient(self.need_table(), self.partition, shards=self.shards, delivery=self.delivery,
                              window_seconds=self.window_seconds, ddb=self.clients()["dynamodb"],
                              sqs=self.clients()["sqs"], clock=SystemClock())


def _first(*values: Any) -> Any:
    """``a or b or c``: the first true value, else the last one."""
    return next((v for v in values if v), values[-1])


def resolve_target(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Target:
    from punctual.local.stack import read_local_json

    env = os.environ if environ is None else environ
    local = read_local_json(Path(args.state_dir)) or {}
    endpoint = _first(args.endpoint_url, env.get("PUNCTUAL_ENDPOINT_URL"), local.get("endpoint_url"))
    mine = local if local and endpoint == local.get("endpoint_url") else {}  # local.json describes this endpoint
    return Target(
        endpoint_url=endpoint,
        region=_first(args.region, env.get("AWS_REGION"), env.get("AWS_DEFAULT_REGION"), local.get("region"),
                      "us-east-1"),
        table=_first(args.table, env.get(ENV["table_name"]), mine.get("table")),
        partition=_first(args.partition, env.get(ENV["partition_key_value"]), mine.get("partition"), "scheduler"),
        queues=_queues(mine, env),
        rule=_first(env.get(ENV["rule_name"]), mine.get("rule")),
        source=str(Path(args.state_dir) / "local.json") if mine else "flags/env",
        shards=_shards(_first(getattr(args, "shards", None), env.get(ENV["shards"]), mine.get("shards"), 1)),
        delivery=str(_first(env.get(ENV["delivery"]), mine.get("delivery"), "consumer")),
        window_seconds=_whole(_first(env.get(ENV["window_seconds"]), mine.get("window_seconds"), 900), "window"),
        direct_early_margin_ms=_whole(_first_set(env.get(ENV["direct_early_margin_ms"]),
                                                 mine.get("direct_early_margin_ms"), Settings.direct_early_margin_ms),
                                      "direct early margin"),
    )


def _first_set(*values: Any) -> Any:
    """The first value that is not None (0 counts)."""
    return next((v for v in values if v is not None), None)


def _whole(value: Any, name: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise CliError(f"{name} must be a whole number, got {value!r}") from None


def _shards(value: Any) -> int:
    try:
        shards = int(value)
    except (TypeError, ValueError):
        raise CliError(f"shards must be a whole number, got {value!r}") from None
    if not 1 <= shards <= MAX_SHARDS:
        raise CliError(f"shards must be 1..{MAX_SHARDS}, got {shards}")
    return shards


def _queues(local: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    queues = dict(local.get("queues", {}))
    queues.update({role: env[ENV[f"{role}_queue_url"]] for role in QUEUE_ROLES if env.get(ENV[f"{role}_queue_url"])})
    return queues


def configured_endpoint(args: argparse.Namespace) -> str | None:
    """The endpoint an error message names (None: real AWS, or not known)."""
    endpoint = getattr(args, "endpoint_url", None) or os.environ.get("PUNCTUAL_ENDPOINT_URL")
    if endpoint is None:
        try:
            endpoint = resolve_target(args).endpoint_url
        except Exception:
            endpoint = None
    return endpoint
