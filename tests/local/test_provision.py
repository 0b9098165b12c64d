"""The template walker's intrinsic functions and naming (moto in-process, no server)."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from punctual.local.provision import Provisioner, TemplateUnsupported, local_name
from tests.local.templates import mini_template


@pytest.fixture
def clients():
    with mock_aws():
        yield {n: boto3.client(n, region_name="us-east-1") for n in ("dynamodb", "sqs", "events")}


def test_local_names():
    assert local_name("SchedulerDelayQueue47B5C64A", "punctual", "Scheduler") == "punctual-delay-queue"
    assert local_name("SchedulerTable43AD0AB1", "punctual", "Scheduler") == "punctual-table"
    assert local_name("MyDLQQueue", "p") == "p-my-dlq-queue"


def test_intrinsics(clients):
    t = mini_template()
    t["Conditions"] = {"IsUsEast1": {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-east-1"]}}
    env = t["Resources"]["SchedulerPollerFn12345678"]["Properties"]["Environment"]["Variables"]
    env.update({
        "SUB": {"Fn::Sub": "${AWS::AccountId}/${SchedulerTable0C1D2E3F}/${SchedulerDelayQueue5A6B7C8D.QueueName}"},
        "SUB2": {"Fn::Sub": ["${X}-${!Literal}", {"X": {"Ref": "AWS::Partition"}}]},
        "SEL": {"Fn::Select": [1, {"Fn::Split": [":", {"Fn::GetAtt": ["SchedulerTable0C1D2E3F", "Arn"]}]}]},
        "IF": {"Fn::If": ["IsUsEast1", "yes", "no"]},
        "GONE": {"Ref": "AWS::NoValue"},
        "STREAM": {"Fn::GetAtt": ["SchedulerTable0C1D2E3F", "StreamArn"]},
    })
    model = Provisioner(t, clients).provision()
    env = model.functions["SchedulerPollerFn12345678"].environment
    assert env["SUB"] == "123456789012/punctual-table/punctual-delay-queue"
    assert env["SUB2"] == "aws-${Literal}"
    assert env["SEL"] == "aws"
    assert env["IF"] == "yes"
    assert "GONE" not in env
    assert env["STREAM"].startswith("arn:aws:dynamodb:us-east-1:123456789012:table/punctual-table/stream/")
    assert env["PUNCTUAL_DELAY_QUEUE_URL"].endswith("/punctual-delay-queue")
    stream_map = next(m for m in model.mappings.values() if m.kind == "dynamodb")
    assert (stream_map.bisect_on_error, stream_map.maximum_retry_attempts, stream_map.batch_size) == (True, 3, 100)
    rule = model.rules["SchedulerRuleF00DF00D"]
    assert rule.target_arns == [model.functions["SchedulerPollerFn12345678"].arn]


def test_unsupported_intrinsic_is_a_clear_error(clients):
    t = mini_template()
    t["Resources"]["SchedulerPollerFn12345678"]["Properties"]["Environment"]["Variables"]["X"] = {
        "Fn::ImportValue": "elsewhere"}
    with pytest.raises(TemplateUnsupported, match="Fn::ImportValue"):
        Provisioner(t, clients).provision()


def test_deploy_time_resources_have_no_local_behaviour(clients):
    """The construct's resync custom resource and CDK's Node.js provider run at deploy time in
    CloudFormation; locally there are no deployments: both are listed as ignored, not run."""
    t = mini_template()
    t["Resources"]["AWS679f53fac002430cb0da5b7982bd22872D164C4C"] = {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Runtime": "nodejs22.x", "Handler": "index.handler",
                       "Code": {"S3Bucket": {"Fn::Sub": "cdk-assets-${AWS::AccountId}"}, "S3Key": "x.zip"}}}
    t["Resources"]["SchedulerResyncRule0A1B2C3D"] = {
        "Type": "Custom::AWS",
        "Properties": {"ServiceToken": {"Fn::GetAtt": ["AWS679f53fac002430cb0da5b7982bd22872D164C4C", "Arn"]}}}
    model = Provisioner(t, clients).provision()
    assert "AWS679f53fac002430cb0da5b7982bd22872D164C4C" not in model.functions
    assert model.ignored["AWS::Lambda::Function (nodejs22.x)"] == 1
    assert model.ignored["Custom::AWS"] == 1
    python = {lid for lid, r in t["Resources"].items()
              if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Runtime", "python").startswith("python")}
    assert python and set(model.functions) == python
