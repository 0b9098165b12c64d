"""``local.json`` names each queue of the construct's template by its role, the same names in both
delivery modes: the rule's dead-letter queue is ``rule_dlq`` in both (it was its queue name in the
default mode and ``control_dlq`` in direct delivery)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from punctual.core.config import load_settings
from punctual.local.provision import provision
from punctual.local.stack import queue_roles


def roles_of(synth) -> tuple[dict[str, str], dict[str, str]]:
    """The template provisioned in moto as the local stack does: (queue URL by role, queue URL by
    the construct's attribute)."""
    with mock_aws():
        clients = {n: boto3.client(n, region_name="us-east-1") for n in ("dynamodb", "sqs", "events", "sns")}
        model = provision(synth.json, clients)
        env: dict[str, str] = {}
        for fn in model.functions.values():
            env.update(fn.environment)
        url_of = {q.logical_id: q.url for q in model.queues.values()}
        s = synth.scheduler
        queues = {"rule_dead_letter_queue": s.rule_dead_letter_queue, "dead_letter_queue": s.dead_letter_queue,
                  "delay_dead_letter_queue": s.delay_dead_letter_queue}
        by_attribute = {name: url_of[synth.logical_id(q)] for name, q in queues.items() if q is not None}
        return queue_roles(model, load_settings(env)), by_attribute


@pytest.mark.parametrize("mode, roles", [
    ("demo", {"delay", "delivery", "rejected", "delay_dlq", "delivery_dlq", "rule_dlq"}),
    ("direct", {"delivery", "rejected", "delivery_dlq", "rule_dlq"}),
])
def test_local_json_names_the_queues_alike_in_both_delivery_modes(mode, roles, request):
    found, by_attribute = roles_of(request.getfixturevalue(mode))
    assert set(found) == roles  # every queue has a role: none is left under its own name
    assert found["rule_dlq"] == by_attribute["rule_dead_letter_queue"]
    assert found["delivery_dlq"] == by_attribute["dead_letter_queue"]
    if mode == "demo":
        assert found["delay_dlq"] == by_attribute["delay_dead_letter_queue"]
