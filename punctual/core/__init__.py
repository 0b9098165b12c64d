"""Pure domain of Punctual (keys, models, planning, cron, clock) plus client-taking adapters.

Nothing in this package imports boto3 at module level; handlers pass clients in.
"""
