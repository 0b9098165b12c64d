"""Classify botocore errors without importing botocore."""

from __future__ import annotations

THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "TooManyRequestsException",
        "RequestThrottledException",
        "LimitExceededException",
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "AWS.SimpleQueueService.InternalError",
        # what botocore's standard retry mode also retries (our clients have its retries off)
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "TransactionInProgressException",
        # a single-item write on an item an ongoing transaction names (the consumer's fence while a
        # cancel checks it, a claim while a cancel deletes the row): DynamoDB says retry
        "TransactionConflictException",
        "InternalServerError",
        "ServiceUnavailableException",
        "SlowDown",
        "BandwidthLimitExceeded",
        "EC2ThrottledException",
    }
)


def error_code(exc: BaseException) -> str | None:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("Error", {}).get("Code")
    return None


def is_conditional_failure(exc: BaseException) -> bool:
    return error_code(exc) in ("ConditionalCheckFailedException", "TransactionCanceledException")


def is_retryable(exc: BaseException) -> bool:
    code = error_code(exc)
    if code is None:
        # connection errors and timeouts from botocore carry no response
        return type(exc).__name__ in (
            "EndpointConnectionError",
            "ConnectionClosedError",
            "ReadTimeoutError",
            "ConnectTimeoutError",
            "ReadTimeout",
            "ConnectionError",
        )
    if code in THROTTLING:
        return True
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")  # type: ignore[attr-defined]
    return isinstance(status, int) and status >= 500
