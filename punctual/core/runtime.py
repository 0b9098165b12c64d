"""Wiring for the Lambda handlers: settings, clock and AWS clients, built once per container.

The only place boto3 is imported (lazily), so the rest of ``punctual.core`` stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .clock import Clock, SystemClock
from .config import Settings, load_settings


@dataclass
class Deps:
    settings: Settings
    clock: Clock
    ddb: Any
    sqs: Any
    events: Any


_cached: Deps | None = None


def pool_size(settings: Settings) -> int:
    """HTTP connections each client keeps: one per send worker, plus the handler's own calls.
    botocore's default (10) is below the 16 send workers: the extra threads' connections were
    discarded after each call and re-opened (a TCP + TLS handshake per request)."""
    return settings.send_workers + 4


def make_clients(endpoint_url: str | None = None, region: str | None = None,
                 max_pool_connections: int = 10) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    cfg = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=20,
                 max_pool_connections=max_pool_connections)
    kw: dict[str, Any] = {"config": cfg}
    if endpoint_url:
        kw["endpoint_url"] = endpoint_url
    if region:
        kw["region_name"] = region
    return {name: boto3.client(name, **kw) for name in ("dynamodb", "sqs", "events")}


def default_deps() -> Deps:
    """Deps from the environment (AWS_ENDPOINT_URL is honoured by boto3 itself)."""
    global _cached
    if _cached is None:
        settings = load_settings()
        clients = make_clients(max_pool_connections=pool_size(settings))
        _cached = Deps(
            settings=settings,
            clock=SystemClock(),
            ddb=clients["dynamodb"],
            sqs=clients["sqs"],
            events=clients["events"],
        )
    return _cached


def reset_default_deps() -> None:
    global _cached
    _cached = None
