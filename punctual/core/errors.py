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
        )
    return code in THROTTLING
