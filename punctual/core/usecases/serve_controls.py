"""Use case "serve the control topic": the poller invoked by SNS, in direct delivery.

Direct delivery deploys no delay queue and no consumer (docs/architecture.md, "Direct delivery").
Its control channel is an SNS topic the poller is subscribed to: poll requests
(:func:`~punctual.core.usecases.ensure_poll.request_poll`) are published to it, and it is the
OnFailure destination of the poller's invocations and of the editor's stream. The poller serves
those messages as the consumer serves them in the default mode
(:func:`~punctual.core.usecases.ensure_poll.arm_for_controls`): it arms one poll. Where the consumer
asks again through the delay queue 20 s later, this invocation raises :class:`AskAgain`: Lambda
retries the event (after 1 and then 2 minutes), then sends it to the OnFailure destination, the
topic: a failure notice, served the same way. Nothing idles: SNS bills the messages published.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from punctual.core import observability as obs
from punctual.core.consumer_rules import Control, PoisonMessage, parse_control
from punctual.core.runtime import Deps
from punctual.core.usecases.ensure_poll import arm_for_controls, control_metrics, request_poll


class AskAgain(RuntimeError):
    """The poll asked for could not be armed for good yet: Lambda retries the event."""


def is_control_event(event: Any) -> bool:
    """Whether ``event`` is SNS's (the control topic), not the rule's."""
    records = event.get("Records") if isinstance(event, dict) else None
    return isinstance(records, list) and bool(records) and isinstance(records[0], dict) \
        and records[0].get("EventSource") == "aws:sns"


def _published_ms(sns: dict[str, Any], default: int) -> int:
    try:
        return int(datetime.fromisoformat(str(sns["Timestamp"]).replace("Z", "+00:00")).timestamp() * 1000)
    except (KeyError, ValueError):
        return default


def _retried_event(record: Any) -> dict[str, Any] | None:
    """The event of this topic that ``record`` is Lambda's OnFailure record of (this function's own
    retries of a control message ran out), or None: a poll request, another invocation's notice."""
    try:
        data = json.loads(record["Sns"]["Message"])
    except (KeyError, TypeError, ValueError):
        return None
    payload = data.get("requestPayload") if isinstance(data, dict) else None
    return payload if is_control_event(payload) else None


def _first_wanted(record: Any, now_ms: int) -> int:
    """When the request at the root of a chain of retried control events was wanted by: asked afresh,
    the chain keeps it, so it ends as the consumer's requests asked again do (ARMED_ALONE_ASK_AGAIN_MS)."""
    wanted = now_ms
    while (inner := _retried_event(record)) is not None:
        record = inner["Records"][0]
        for control in controls_of(inner, now_ms):
            wanted = control.poll_by_ms if control.poll_by_ms is not None else wanted
    return wanted


def controls_of(event: dict[str, Any], now_ms: int) -> list[Control]:
    """The event's poll requests and failure notices. A notice (a poll wanted as soon as possible)
    is taken as wanted by the time it was published: the same minute is armed for it
    (ensure_poll.poll_minute), and its retries stop as the consumer's requests asked again do. A
    message that is neither is logged and skipped: a retry would not make it one."""
    out: list[Control] = []
    for record in event.get("Records") or []:
        sns = record.get("Sns") if isinstance(record, dict) else None
        if not isinstance(sns, dict):
            obs.log("ERROR", "poison control message", reason="record has no Sns")
            continue
        mid = str(sns.get("MessageId", ""))
        try:
            control = parse_control(mid, str(sns.get("Message", "")))
        except PoisonMessage as exc:
            obs.log("ERROR", "poison control message", message_id=mid, reason=str(exc))
            continue
        if control.poll_by_ms is None:
            control = replace(control, poll_by_ms=_published_ms(sns, now_ms))
        out.append(control)
    return out


def serve_controls(event: dict[str, Any], deps: Deps) -> dict[str, Any]:
    """Arm one poll for the event's messages; raises :class:`AskAgain` when that must be tried again."""
    now = deps.clock.now_ms()
    controls = controls_of(event, now)
    obs.metrics(deps.settings, control_metrics(controls), timestamp_ms=now)
    if not controls:
        return {"controls": 0}
    by, again = arm_for_controls(deps, controls)
    if again is None:
        return {"controls": len(controls), "poll_by_ms": by}
    retried = [r for r in event.get("Records") or [] if _retried_event(r) is not None]
    if retried:
        # Lambda's record of this topic's event nests the event it retried: asked afresh instead, a
        # chain of them stays one small message (ensure_poll.request_poll), wanted by its first time
        request_poll(deps, min(_first_wanted(r, now) for r in retried), again)
        return {"controls": len(controls), "poll_by_ms": by, "asked_again": again}
    raise AskAgain(again)
