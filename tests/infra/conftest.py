"""Shared, module-scoped CDK synths (each costs seconds on 2 cores: keep their number low).

- ``demo``: the cdk.json app (Scheduler with defaults + example consumer + producer role),
  with cdk-nag's AwsSolutions plugin registered: the synth itself fails on any finding.
- ``custom``: every non-default prop (existing delivery queue, KMS key, x86_64, no alarms,
  poller reserved concurrency 2, other partition and window (Duration props), instance name,
  a dashboard, 4 shards) plus a grant_consume.

- ``direct``: ``delivery="direct"`` with defaults (alarms, the AWS managed SNS key), a producer role.
- ``direct_custom``: ``delivery="direct"`` with a customer KMS key, a brought delivery queue under
  another key, a dashboard.

All skip asset bundling (context ``aws:cdk:bundling-stacks`` = []) and CDK's built-in
CloudFormation validation (~10 s per synth; cfn-lint runs on the templates instead).
One test in test_bundling.py bundles for real.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

NO_BUNDLING = {"aws:cdk:bundling-stacks": []}
FAST_APP = {"stack_traces": False, "builtin_cloud_formation_validation": False}


@dataclass
class Synth:
    app: Any
    stack: Any
    scheduler: Any
    template: Any  # aws_cdk.assertions.Template
    json: dict[str, Any]
    extra: dict[str, Any]

    def resources(self, cfn_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == cfn_type}

    def logical_id(self, construct: Any) -> str:
        return self.stack.get_logical_id(construct.node.default_child)


def _synth(app, stack, scheduler, **extra) -> Synth:
    from aws_cdk.assertions import Template

    template = Template.from_stack(stack)
    return Synth(app, stack, scheduler, template, template.to_json(), extra)


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Synth:
    from infra.app import build_app

    app = build_app(outdir=str(tmp_path_factory.mktemp("cdk-demo")), context=NO_BUNDLING, nag=True, **FAST_APP)
    stack = app.node.find_child("PunctualDemo")
    return _synth(app, stack, stack.scheduler)


@pytest.fixture(scope="session")
def custom(tmp_path_factory) -> Synth:
    from aws_cdk import App, Duration, RemovalPolicy, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_sqs as sqs

    from infra import Scheduler

    app = App(outdir=str(tmp_path_factory.mktemp("cdk-custom")), context=NO_BUNDLING, **FAST_APP)
    stack = Stack(app, "Custom")
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    existing = sqs.Queue(
        stack, "Existing", encryption=sqs.QueueEncryption.KMS, encryption_master_key=key, enforce_ssl=True,
        dead_letter_queue=sqs.DeadLetterQueue(
            max_receive_count=3,
            queue=sqs.Queue(stack, "ExistingDlq", encryption=sqs.QueueEncryption.KMS, encryption_master_key=key,
                            enforce_ssl=True),
        ),
    )
    scheduler = Scheduler(
        stack,
        "Jobs",
        partition_key_value="jobs",
        window=Duration.minutes(10),
        lead=Duration.seconds(60),
        orphan_grace=Duration.minutes(4),
        delivery_queue=existing,
        removal_policy=RemovalPolicy.DESTROY,
        encryption_key=key,
        alarms=False,
        architecture=lambda_.Architecture.X86_64,
        poller_reserved_concurrency=2,
        consumer_max_concurrency=20,
        instance_name="jobs-prod",
        dashboard=True,
        shards=4,
    )
    worker = iam.Role(stack, "Worker", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    grant = scheduler.grant_consume(worker)
    return _synth(app, stack, scheduler, key=key, existing=existing, worker=worker, grant=grant)


@pytest.fixture(scope="session")
def direct(tmp_path_factory) -> Synth:
    from aws_cdk import App, RemovalPolicy, Stack
    from aws_cdk import aws_iam as iam

    from infra import Scheduler

    app = App(outdir=str(tmp_path_factory.mktemp("cdk-direct")), context=NO_BUNDLING, **FAST_APP)
    stack = Stack(app, "Direct")
    scheduler = Scheduler(stack, "Scheduler", delivery="direct", removal_policy=RemovalPolicy.DESTROY)
    producer = iam.Role(stack, "Producer", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    scheduler.grant_schedule(producer)
    return _synth(app, stack, scheduler, producer=producer)


@pytest.fixture(scope="session")
def direct_custom(tmp_path_factory) -> Synth:
    from aws_cdk import App, Stack
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_sqs as sqs

    from infra import Scheduler

    app = App(outdir=str(tmp_path_factory.mktemp("cdk-direct-custom")), context=NO_BUNDLING, **FAST_APP)
    stack = Stack(app, "DirectCustom")
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    other_key = kms.Key(stack, "OtherKey", enable_key_rotation=True)
    existing = sqs.Queue(
        stack, "Existing", encryption=sqs.QueueEncryption.KMS, encryption_master_key=other_key, enforce_ssl=True,
        dead_letter_queue=sqs.DeadLetterQueue(
            max_receive_count=3,
            queue=sqs.Queue(stack, "ExistingDlq", encryption=sqs.QueueEncryption.KMS,
                            encryption_master_key=other_key, enforce_ssl=True),
        ),
    )
    scheduler = Scheduler(stack, "Jobs", delivery="direct", encryption_key=key, delivery_queue=existing,
                          dashboard=True, instance_name="jobs-direct")
    return _synth(app, stack, scheduler, key=key, other_key=other_key, existing=existing)
