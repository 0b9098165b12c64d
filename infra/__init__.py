"""Punctual's AWS CDK construct (``Scheduler``) and its Docker-free Lambda packaging.

Installed as ``punctual.cdk``; it needs the ``[cdk]`` extra (aws-cdk-lib, constructs), named with
the command that installs it when missing, as the other extras are (punctual/extras.py).
"""

from punctual.extras import installed, missing_message

_NEEDS = ("aws_cdk", "constructs")
_MISSING = missing_message("punctual.cdk (the Scheduler construct)", _NEEDS)
if _MISSING:
    raise ModuleNotFoundError(_MISSING, name=next(m for m in _NEEDS if not installed(m)))

from .construct import Scheduler  # noqa: E402

__all__ = ["Scheduler"]
