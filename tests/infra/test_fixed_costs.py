"""The benchmark's fixed monthly cost counts the construct's alarms (punctual/bench/billing.py ALARMS): the
count must be the one a synthesized construct has with its defaults, in both delivery modes."""

from __future__ import annotations

from punctual.bench.billing import ALARMS


def test_the_bench_counts_the_alarms_the_construct_makes(demo, direct):
    assert len(demo.resources("AWS::CloudWatch::Alarm")) == len(demo.scheduler.alarms) == ALARMS["default"]
    assert len(direct.resources("AWS::CloudWatch::Alarm")) == len(direct.scheduler.alarms) == ALARMS["direct"]
    assert demo.scheduler.dashboard is None and direct.scheduler.dashboard is None  # off by default: not counted
