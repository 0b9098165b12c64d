"""What AWS bills beyond the calls the functions make (issue 29): the receives Lambda's SQS event source
makes on an idle queue, and the platform's own log lines of every invocation.

Pure: no I/O.
"""

from __future__ import annotations

import math

IDLE_RECEIVE_API = "sqs.ReceiveMessage(idle)"  # by_api name of the event source's empty receives
_REQUEST_ID = "8f5f6a2e-1c3b-4b7a-9a7e-2f0a8c9d1e2f"  # a request id is a UUID: 36 characters


def idle_receives(horizon_ms: int, pollers: int, wait_s: int) -> int:
    """Long polls of an idle queue over ``horizon_ms``: each poller makes one ReceiveMessage per
    ``wait_s`` (a receive that returns messages is counted where it happens; the busy share of a
    run is negligible next to its idle time, so this slightly overcounts)."""
    if pollers <= 0 or wait_s <= 0:
        return 0
    return pollers * math.ceil(horizon_ms / (wait_s * 1000))


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
