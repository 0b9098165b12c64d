"""``punctual bench``: a discrete-event simulator that runs the real Punctual handlers in
virtual time against moto, next to models of the alternatives (cdk-scheduler's fixed-rate
poller, EventBridge Scheduler one-time schedules). See docs/benchmark.md.
"""
