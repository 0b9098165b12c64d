"""Exit codes, the CLI's own error, and the one line (and exit code) for any failure."""

from __future__ import annotations

from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)

from punctual.errors import InvalidSchedule, NotFound
from punctual.timeparse import TimeSpecError

EXIT_ERROR = 1
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_PARTIAL = 5  # `punctual redrive` left some messages on the queue (each named on stdout)

_MISSING_RESOURCE = ("ResourceNotFoundException", "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")

Described = tuple[str, int] | None


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


def describe_error(exc: BaseException, endpoint: str | None = None) -> tuple[str, int]:
    """One line for any failure, and the exit code."""
    found = _own(exc) or _connection(exc, endpoint) or _aws(exc) or _client(exc) or _missing_extra(exc)
    if found:
        return found
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__, EXIT_ERROR


def _own(exc: BaseException) -> Described:
    """The CLI's, the time parser's and the local stack's errors: their message is the line."""
    from punctual.local.provision import TemplateUnsupported
    from punctual.local.stack import LocalStackError
    from punctual.local.template import TemplateError

    if isinstance(exc, CliError):
        return str(exc), exc.code
    if isinstance(exc, (TimeSpecError, TemplateError, LocalStackError, TemplateUnsupported)):
        return str(exc), EXIT_ERROR
    return None


def _connection(exc: BaseException, endpoint: str | None) -> Described:
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        hint = " (is `punctual local up` running?)" if endpoint else ""
        return f"cannot reach {endpoint or 'AWS'}{hint}", EXIT_UNREACHABLE
    if isinstance(exc, NoCredentialsError):
        return "no AWS credentials (for the local stack pass --endpoint-url or run `punctual local up`)", EXIT_ERROR
    if isinstance(exc, NoRegionError):
        return "no AWS region: pass --region or set AWS_REGION", EXIT_ERROR
    return None


def _aws(exc: BaseException) -> Described:
    if not isinstance(exc, ClientError):
        return None
    err = exc.response.get("Error", {})
    code = err.get("Code", "?")
    if code in _MISSING_RESOURCE:
        return f"not found: {err.get('Message', code)} (wrong --table/--endpoint-url?)", EXIT_NOT_FOUND
    return f"AWS error {code}: {err.get('Message', '')}".strip(), EXIT_ERROR


def _missing_extra(exc: BaseException) -> Described:
    """A module of an extra that is not installed: name the extra (cli/extras.py)."""
    from punctual.extras import describe_missing_module

    line = describe_missing_module(exc)
    return (line, EXIT_ERROR) if line else None


def _client(exc: BaseException) -> Described:
    """The Python client's errors (an AlreadyDelivered is a NotFound whose message says so)."""
    if isinstance(exc, NotFound):
        return f"not found: {exc}", EXIT_NOT_FOUND
    if isinstance(exc, InvalidSchedule):
        return f"invalid schedule: {exc}", EXIT_ERROR
    return None
