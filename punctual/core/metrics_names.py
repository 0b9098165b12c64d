"""Names of the metrics the functions emit (EMF) and the construct reads.

Single source of truth shared by the handlers (emit) and the CDK construct
(``Scheduler.metric_*`` and its alarms). The namespace is a setting
(``Settings.metrics_namespace``, default ``"Punctual"``).
"""

from __future__ import annotations

# Every metric carries this dimension, valued ``Settings.instance_name``: two schedulers in one
# account (or one namespace) keep their figures and alarms apart.
INSTANCE_DIMENSION = "Instance"

# Consumer: milliseconds between a task's due time and its delivery (unit Milliseconds).
LATENESS_MS = "LatenessMs"
# Any function: rows refused and moved to the rejected-rows queue (unit Count).
REJECTED_ROWS = "RejectedRows"
# Consumer: events delivered, messages dropped (row cancelled/rescheduled), put back (far
# early), poison messages (unreadable bodies) per invocation (unit Count).
DELIVERED = "Delivered"
DROPPED = "Dropped"
PUT_BACK = "PutBack"
POISON_MESSAGES = "PoisonMessages"
# Poller: orphans not resent because the delay queue had a backlog at least that large (unit Count).
ORPHANS_DEFERRED = "OrphansDeferred"
# Consumer: Lambda failure notices received (a poll whose attempts ran out, a stream batch given
# up on: the OnFailure destinations are the delay queue) and poll requests served (unit Count).
FUNCTION_FAILURES = "FunctionFailures"
POLL_REQUESTS = "PollRequests"

# Self-measurement (docs/construct.md, "Self-measurement"): the AWS-side latencies the design rests
# on, measured by each function at its start from the attributes of Lambda's event, in its existing
# EMF record (no request). Unit Milliseconds, never negative (CloudWatch gives no percentiles for a
# period holding a negative value): an early arrival counts 0.
# Consumer: from a pointer message's planned visibility (its SentTimestamp + the DelaySeconds its
# body carries) to the start of the invocation that received it first.
PICKUP_MS = "PickupMs"
# Consumer: 1 for an invocation that is its execution environment's first (unit Count; emitted only then).
COLD_STARTS = "ColdStarts"
# Poller: from the minute the rule fired for (its Scheduled Event's ``time``) to the poll's start.
POLL_DELAY_MS = "PollDelayMs"
# Editor: from each stream record's ApproximateCreationDateTime (whole seconds, rounded down: up to
# 999 ms over the true lag) to the start of the invocation carrying it.
STREAM_LAG_MS = "StreamLagMs"
