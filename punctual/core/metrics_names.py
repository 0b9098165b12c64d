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
