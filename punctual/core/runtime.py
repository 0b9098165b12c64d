"""Wiring for the Lambda handlers: settings, clock and AWS clients, built once per container.

The only place boto3 is imported (lazily), so the rest of ``punctual.core`` stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import observability as obs
from .arming import RuleSeen
from .clock import Clock, SystemClock
from .config import Settings, load_settings
from .retry import deadline_of, set_deadline

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient


@dataclass
class Deps:
    settings: Settings
    clock: Clock
    ddb: DynamoDBClient
    sqs: SQSClient
    events: EventBridgeClient
    # what this execution environment last knew the rule to hold (the editor's DescribeRule, once
    # per arm change: arming.RuleSeen)
    rule_seen: RuleSeen = field(default_factory=RuleSeen)
    # direct delivery's control channel (Settings.control_topic_arn); None where there is none
    sns: SNSClient | None = None
    # an invocation has started with these Deps: they live as long as their execution environment
    # (built on its cold start: default_deps), so the next invocation is a warm one
    warm: bool = False


_cached: Deps | None = None


def pool_size(settings: Settings) -> int:
    """HTTP connections each client keeps: one per send worker, plus the handler's own calls.
    botocore's default (10) is below the 16 send workers: the extra threads' connections were
    discarded after each call and re-opened (a TCP + TLS handshake per request)."""
    return settings.send_workers + 4


def make_clients(endpoint_url: str | None = None, region: str | None = None,
                 max_pool_connections: int = 10, sns: bool = False) -> dict[str, Any]:
    """The clients the functions use; an SNS client too when ``sns`` (a control topic is set)."""
    import boto3
    from botocore.config import Config

    # botocore does not retry: retry.py is the one retry layer, bounded by the invocation's deadline
    cfg = Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=5, read_timeout=20,
                 max_pool_connections=max_pool_connections)
    kw: dict[str, Any] = {"config": cfg}
    if endpoint_url:
        kw["endpoint_url"] = endpoint_url
    if region:
        kw["region_name"] = region
    names = ("dynamodb", "sqs", "events", *(("sns",) if sns else ()))
    return {name: boto3.client(name, **kw) for name in names}


def default_deps(function: str | None = None) -> Deps:
    """Deps from the environment (AWS_ENDPOINT_URL is honoured by boto3 itself), built once per
    execution environment: on its cold start. ``function`` ("poller", "consumer", "editor"): fail
    at once, naming the variable, if the environment lacks a setting it needs (config.REQUIRED).
    The log threshold is ``PUNCTUAL_LOG_LEVEL``."""
    global _cached
    if _cached is None:
        settings = load_settings(function=function)
        obs.set_level(settings.log_level)
        clients = make_clients(max_pool_connections=pool_size(settings), sns=bool(settings.control_topic_arn))
        _cached = Deps(
            settings=settings,
            clock=SystemClock(),
            ddb=clients["dynamodb"],
            sqs=clients["sqs"],
            events=clients["events"],
            sns=clients.get("sns"),
        )
    return _cached


def start_invocation(context: Any, deps: Deps) -> None:
    """What each handler does first: bind the invocation to the log lines, with whether it is its
    execution environment's first (a cold start: ``deps`` were built for it, as Powertools' module-level
    ``is_cold_start`` flag tells), and bound every retry by the time Lambda gives it (none without a
    context)."""
    obs.start_invocation(context, cold_start=not deps.warm)
    deps.warm = True
    set_deadline(deadline_of(context, deps.clock.now_ms()))


def reset_default_deps() -> None:
    global _cached
    _cached = None
