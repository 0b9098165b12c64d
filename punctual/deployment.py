"""How the construct deploys the functions and their event sources: the numbers the emulations of
AWS (the tests' VirtualAws, the benchmark's simulator, the local stack) must model alike.

``infra/construct.py`` builds the Lambda, SQS and event-source settings from these; nothing here
imports aws-cdk (docs/architecture.md, "When arming fails" and "A poison record costs only itself").
"""

from __future__ import annotations

# consumer: a batch of 10 pointers, each may wait in-process up to max_wait_ms before delivery.
CONSUMER_TIMEOUT_S = 30
# AWS: an SQS event source's queue visibility timeout should be >= 6 x the function timeout; a
# failed or crashed batch comes back after it.
DELAY_QUEUE_VISIBILITY_S = 6 * CONSUMER_TIMEOUT_S
# a pointer received more than this many times goes to the delay DLQ
DELAY_MAX_RECEIVE_COUNT = 10
# editor: a stream batch of up to 100 records, a few calls each (seconds at most). Short, with
# few retries: a record whose attempts time out holds the rows behind it in its lane for
# (1 + EDITOR_RETRY_ATTEMPTS) x EDITOR_TIMEOUT_S at most before the stream gives up on it and its
# OnFailure record (the delay queue) brings a poll for its row.
EDITOR_TIMEOUT_S = 20
EDITOR_RETRY_ATTEMPTS = 2
# ... and, bisecting a failed batch (BisectBatchOnFunctionError: the splits use no retry, each takes
# up to the timeout), no record waits longer than this in its lane (MaximumRecordAgeInSeconds, at
# least 60): an older one is discarded to the OnFailure destination. A stream that merely lags
# this much (a burst of inserts on one shard) leaves its rows to the poll the OnFailure records bring.
EDITOR_MAX_RECORD_AGE_S = 60
# The poller's asynchronous invocations are kept at most this long (MaximumEventAgeInSeconds): an
# event still failing or throttled then goes to the OnFailure destination, the delay queue, whose
# consumer arms the next poll, instead of Lambda retrying a throttled event for up to 6 hours, up
# to 5 minutes apart.
POLLER_MAX_EVENT_AGE_S = 120
# The poller's timeout; its poll lease lasts as long (Settings.poll_lease_seconds).
POLLER_TIMEOUT_S = 300
POLLER_RETRY_ATTEMPTS = 2
