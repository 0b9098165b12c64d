"""What AWS bills beyond the calls the functions make (issue 29): the receives Lambda's SQS event source
makes on an idle queue, and the platform's own log lines of every invocation; and the fixed monthly cost of a
deployment, reported apart from the price per million tasks (issue 40): its alarms, the custom metrics its
functions emit, the idle receives, the dashboard when it is on.

Pure: no I/O.
"""

from __future__ import annotations

import json
import math

from punctual.core import metrics_names

from . import prices as P

IDLE_RECEIVE_API = "sqs.ReceiveMessage(idle)"  # by_api name of the event source's empty receives
_REQUEST_ID = "8f5f6a2e-1c3b-4b7a-9a7e-2f0a8c9d1e2f"  # a request id is a UUID: 36 characters


def idle_receives(horizon_ms: int, pollers: int, wait_s: int) -> int:
    """Long polls of an idle queue over ``horizon_ms``: each poller makes one ReceiveMessage per
    ``wait_s`` (a receive that returns messages is counted where it happens; the busy share of a
    run is negligible next to its idle time, so this slightly overcounts)."""
    if pollers <= 0 or wait_s <= 0:
        return 0
    return pollers * math.ceil(horizon_ms / (wait_s * 1000))


# The construct's alarms with its defaults (infra/construct.py, Scheduler._create_alarms): one per dead-letter
# queue, one per function's errors, lateness p99, rejected rows, function failures, and the delay queue's age
# in the default mode. tests/infra/test_fixed_costs.py checks these against a synthesized construct.
ALARMS = {"default": 10, "direct": 7}
MONTH_MS = P.MONTH_HOURS * 3_600_000
DASHBOARD = "(dashboard, when on)"  # a fixed cost's name in parentheses: not in the total


def metric_names() -> tuple[str, ...]:
    """Every metric name the functions may emit: the names of punctual.core.metrics_names (its upper-case
    string constants but the dimension's name), the one list the handlers and the construct share."""
    return tuple(sorted(v for k, v in vars(metrics_names).items()
                        if k.isupper() and isinstance(v, str) and v != metrics_names.INSTANCE_DIMENSION))


def emf_metrics(line: str) -> set[tuple[str, str, tuple[tuple[str, str], ...]]]:
    """The CloudWatch metrics an EMF log line defines: (namespace, name, its dimensions and their values)
    each; a line that is no EMF record defines none. Each is one custom metric, billed while emitted."""
    if '"_aws"' not in line:
        return set()
    try:
        record = json.loads(line)
        directives = record["_aws"]["CloudWatchMetrics"]
    except (ValueError, KeyError, TypeError):
        return set()
    out = set()
    for d in directives:
        for dims in d.get("Dimensions", []) or [[]]:
            values = tuple((k, str(record.get(k))) for k in dims)
            out |= {(d.get("Namespace", ""), m["Name"], values) for m in d.get("Metrics", [])}
    return out


def fixed_monthly(direct: bool, metrics: int, idle_pollers: int, idle_wait_s: int) -> dict[str, float]:
    """A deployment's fixed monthly cost, in USD, by part (a part in parentheses is not in the total): its
    alarms (ALARMS, the construct's defaults), ``metrics`` custom metrics (those its functions emit, each
    billed for the hours it is emitted: a month's worth here), the delay queue's idle receives (the default
    mode: Lambda's event source long-polls it), and the dashboard when it is on (off by default)."""
    return {
        "alarms": ALARMS["direct" if direct else "default"] * P.CLOUDWATCH_ALARM_MONTH,
        "custom metrics": metrics * P.CLOUDWATCH_METRIC_MONTH,
        "idle receives": 0.0 if direct else idle_receives(MONTH_MS, idle_pollers, idle_wait_s) * P.SQS_REQUEST,
        DASHBOARD: P.CLOUDWATCH_DASHBOARD_MONTH,
    }


def fixed_total(parts: dict[str, float]) -> float:
    return sum(v for k, v in parts.items() if not k.startswith("("))


def platform_log_lines(memory_mb: int, duration_ms: int, cold: bool) -> str:
    """The START, END and REPORT lines Lambda writes to the function's log group for one invocation
    (text log format; ``Init Duration`` only after a cold start)."""
    init = "Init Duration: 412.35 ms\t" if cold else ""
    return (f"START RequestId: {_REQUEST_ID} Version: $LATEST\n"
            f"END RequestId: {_REQUEST_ID}\n"
            f"REPORT RequestId: {_REQUEST_ID}\tDuration: {duration_ms:.2f} ms\tBilled Duration: "
            f"{max(1, duration_ms)} ms\tMemory Size: {memory_mb} MB\tMax Memory Used: 98 MB\t{init}\n")


def platform_log_bytes(memory_mb: int, duration_ms: int, cold: bool) -> int:
    return len(platform_log_lines(memory_mb, duration_ms, cold).encode())
