"""EventBridge's control-plane quota (punctual/bench/control_plane.py): 50 requests a second per account,
one bucket for every function, a ThrottlingException over it, and the handlers' retry policy backing off."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from punctual.bench.control_plane import ControlPlaneQuota, throttling_error
from punctual.bench.models import Models
from punctual.bench.punctual_sim import EVENTS_THROTTLED_PREFIX
from punctual.core.errors import is_retryable
from punctual.core.retry import call_with_retry
from tests.bench.sim_support import bare_sim, time_in_consumer

T0 = 1_798_761_600_000


def test_fifty_a_second_with_a_bucket_of_one_second():
    quota = ControlPlaneQuota(per_s=50, burst_ms=1_000)
    assert all(quota.admit("DescribeRule", T0) for _ in range(50))
    assert not quota.admit("PutRule", T0)  # one bucket for every control-plane API
    assert quota.refused == 1
    assert not quota.admit("DescribeRule", T0 + 19)
    assert quota.admit("DescribeRule", T0 + 40)  # refilled at 50 a second: one token per 20 ms
    assert quota.admit("PutEvents", T0 + 40)  # not a control-plane call
    assert all(ControlPlaneQuota(per_s=0).admit("PutRule", T0) for _ in range(1_000))  # 0: no quota


def test_the_refusal_is_what_eventbridge_answers_and_the_handlers_retry_it():
    err = throttling_error("DescribeRule")
    assert isinstance(err, ClientError) and err.response["Error"]["Code"] == "ThrottlingException"
    assert is_retryable(err)


def test_a_handler_over_the_quota_is_throttled_and_backs_off():
    """60 DescribeRule calls 1 ms apart from one consumer: the first 50 take the bucket, the others are
    refused until it refills (50 a second); the retry policy's backoff gets every one through."""
    models = Models(api_latency_ms={"dynamodb": (3, 8), "sqs": (5, 15), "events": (1, 1)}, client_cpu_scale=0.0,
                    cold_start_ms=(0, 0))
    sim = bare_sim(models)

    def calls() -> None:
        for _ in range(60):
            call_with_retry(lambda: sim.h_events.describe_rule(Name=sim.settings.rule_name), sim.clock)

    took = time_in_consumer(sim, calls)
    throttled = sim.result.counters[f"{EVENTS_THROTTLED_PREFIX}consumer:DescribeRule"]
    assert throttled > 0
    assert sim.result.requests[("consumer", "events.DescribeRule")] == 60  # every call got through
    assert took >= (60 - 50) * 20 * 0.9  # the last ten waited for tokens at 50 a second


@pytest.mark.parametrize("tps", [0, 50])
def test_the_quota_is_a_model_parameter(tps):
    assert Models(events_control_tps=tps).events_control_tps == tps
    assert Models().with_overrides(["events_control_tps=100"]).events_control_tps == 100
