"""Punctual's AWS CDK construct (``Scheduler``) and its Docker-free Lambda packaging."""

from .construct import Scheduler

__all__ = ["Scheduler"]
