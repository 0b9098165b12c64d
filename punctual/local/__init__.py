"""Embedded local stack: the construct's resources in moto, the real handlers driven in-process."""

from .provision import LocalModel, Provisioner, provision
from .stack import DEFAULT_PORT, LocalOptions, LocalStack, LocalStackError, read_local_json
from .template import TemplateError, load_template

__all__ = [
    "DEFAULT_PORT",
    "LocalModel",
    "LocalOptions",
    "LocalStack",
    "LocalStackError",
    "Provisioner",
    "TemplateError",
    "load_template",
    "provision",
    "read_local_json",
]
