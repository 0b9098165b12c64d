"""Moved to :mod:`punctual.bench.fakeaws` (the benchmark's ``--backend fake`` uses it too)."""

from punctual.bench.fakeaws import *  # noqa: F401,F403
from punctual.bench.fakeaws import FakeAws, Message, RuleCall, _Client, _Emitter, _err  # noqa: F401
