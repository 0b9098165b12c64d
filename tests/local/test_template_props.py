"""JSON props of `punctual local up --prop` / the demo become the construct's keyword arguments."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

from punctual.core.config import ENV  # noqa: E402
from punctual.local.template import construct_kwargs, synthesize_in_process  # noqa: E402


def test_duration_props_from_seconds_or_iso8601():
    kw = construct_kwargs({"window": 300, "lead": "PT1M30S", "partition_key_value": "jobs", "window_seconds": 5})
    assert kw["window"].to_seconds() == 300
    assert kw["lead"].to_seconds() == 90
    assert kw["partition_key_value"] == "jobs"
    assert kw["window_seconds"] == 5  # a deprecated alias passes through (the construct warns)


@pytest.mark.parametrize("bad", [True, [300], {"seconds": 300}])
def test_a_duration_prop_of_another_type_is_refused(bad):
    with pytest.raises(ValueError, match="window"):
        construct_kwargs({"window": bad})


def test_demo_props_reach_the_functions():
    from punctual.demo import DEMO_PROPS

    template = synthesize_in_process(DEMO_PROPS)
    envs = [r["Properties"]["Environment"]["Variables"] for r in template["Resources"].values()
            if r["Type"] == "AWS::Lambda::Function" and "Environment" in r["Properties"]]
    assert envs and all((e[ENV["window_seconds"]], e[ENV["lead_seconds"]]) == ("70", "10") for e in envs)
