"""Punctual: precision one-off task scheduler for AWS serverless."""

__version__ = "0.1.0"
