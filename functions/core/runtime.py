"""Wiring for the Lambda handlers: settings, clock and AWS clients, built once per container.

The only place boto3 is imported (lazily), so the rest of ``functions.core`` stays pure.
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


def make_clients(endpoint_url: str | None = None, region: str | None = None) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    cfg = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=20)
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
        clients = make_clients()
        _cached = Deps(
            settings=load_settings(),
            clock=SystemClock(),
            ddb=clients["dynamodb"],
            sqs=clients["sqs"],
            events=clients["events"],
        )
    return _cached


def reset_default_deps() -> None:
    global _cached
    _cached = None
