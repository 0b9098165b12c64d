"""Punctual Lambda functions: pure core plus three thin handlers."""
