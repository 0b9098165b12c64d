"""Run a template's Lambda function in-process, as its Handler string names it.

Environment variables are process-global, so the function's template
``Environment`` is not exported: it becomes the function's own
:class:`~punctual.core.runtime.Deps` (``load_settings(env)`` plus boto3 clients aimed
at the local endpoint), passed to the handler as ``handler(event, context, deps=...)``:
the very code Lambda runs, context and all (the three Punctual handlers take ``deps``).
A handler without a ``deps`` parameter is called as ``handler(event, context)`` with the
environment exported around the call (serialised by a lock).
"""

from __future__ import annotations

import importlib
import inspect
import os
import threading
import time
import uuid
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from punctual.core.clock import SystemClock
from punctual.core.config import load_settings
from punctual.core.runtime import Deps, make_clients, pool_size

from .provision import Function

_env_lock = threading.Lock()


class InvokeError(RuntimeError):
    pass


def import_handler(handler: str) -> tuple[ModuleType, str]:
    """``punctual.functions.poller.handler.handler`` -> (module, attribute); also tries a ``punctual.functions.``
    prefix for assets rooted at ``functions/`` (handler ``poller.handler.handler``)."""
    module_name, _, attr = handler.rpartition(".")
    if not module_name:
        raise InvokeError(f"bad Handler string {handler!r}")
    errors = []
    for candidate in (module_name, f"punctual.functions.{module_name}"):
        try:
            return importlib.import_module(candidate), attr
        except ModuleNotFoundError as exc:
            errors.append(str(exc))
    raise InvokeError(f"cannot import the handler {handler!r}: {'; '.join(errors)}")


@dataclass
class _Context:
    function_name: str
    aws_request_id: str
    invoked_function_arn: str
    memory_limit_in_mb: int = 256
    deadline_ms: int = 0

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.deadline_ms - int(time.time() * 1000))


class LocalFunction:
    def __init__(self, spec: Function, endpoint_url: str, region: str):
        self.spec = spec
        self.module, self.attr = import_handler(spec.handler)
        self.takes_deps = "deps" in inspect.signature(getattr(self.module, self.attr)).parameters
        self.settings = load_settings(spec.environment)
        clients = make_clients(endpoint_url, region, max_pool_connections=pool_size(self.settings),
                               sns=bool(self.settings.control_topic_arn))  # as runtime.default_deps
        self.deps = Deps(
            settings=self.settings,
            clock=SystemClock(),
            ddb=clients["dynamodb"],
            sqs=clients["sqs"],
            events=clients["events"],
            sns=clients.get("sns"),
        )
        self.invocations = 0
        self.errors = 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.spec.name

    def invoke(self, event: dict[str, Any]) -> Any:
        """Call the handler with ``event`` and a Lambda-like context (its remaining time counts
        down from the function's timeout)."""
        with self._lock:
            self.invocations += 1
        try:
            return self._call_handler(event)
        except BaseException:
            with self._lock:
                self.errors += 1
            raise

    def _call_handler(self, event: dict[str, Any]) -> Any:
        fn = getattr(self.module, self.attr)
        ctx = _Context(self.spec.name, str(uuid.uuid4()), self.spec.arn,
                       deadline_ms=int(time.time() * 1000) + self.spec.timeout_s * 1000)
        if self.takes_deps:
            return fn(event, ctx, deps=self.deps)
        with _env_lock:
            saved = {k: os.environ.get(k) for k in self.spec.environment}
            os.environ.update(self.spec.environment)
            try:
                return fn(event, ctx)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
