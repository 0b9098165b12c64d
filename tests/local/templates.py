"""A small CloudFormation template shaped like the construct's (CDK-style logical ids and
intrinsics), for testing the template walker and the drivers without synthesizing."""

from __future__ import annotations

from typing import Any

from punctual.core.config import ENV


def _arn(lid: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [lid, "Arn"]}


def _fn(handler: str, env: dict[str, Any]) -> dict[str, Any]:
    return {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Handler": handler,
            "Runtime": "python3.12",
            "Role": _arn("SchedulerRoleAAAA1111"),
            "Timeout": 30,
            "Environment": {"Variables": env},
        },
    }


# the rule target's dead-letter queue (the construct's rule_dead_letter_queue; with direct delivery also
# the control topic subscription's)
RULE_DLQ = "SchedulerRuleDeadLetterQueueD1D1D1D1"


def mini_template(
    poller: str = "punctual.functions.poller.handler.handler",
    consumer: str = "punctual.functions.consumer.handler.handler",
    editor: str = "punctual.functions.editor.handler.handler",
    max_receives: int = 3,
) -> dict[str, Any]:
    env = {
        ENV["table_name"]: {"Ref": "SchedulerTable0C1D2E3F"},
        ENV["partition_key_value"]: "scheduler",
        ENV["delay_queue_url"]: {"Ref": "SchedulerDelayQueue5A6B7C8D"},
        ENV["delivery_queue_url"]: {"Ref": "SchedulerDeliveryQueueA1B2C3D4"},
        ENV["rejected_queue_url"]: {"Ref": "SchedulerRejectedQueue99AA88BB"},
        ENV["rule_name"]: {"Ref": "SchedulerRuleF00DF00D"},
    }
    return {
        "Parameters": {"BootstrapVersion": {"Type": "AWS::SSM::Parameter::Value<String>", "Default": "/cdk"}},
        "Resources": {
            "SchedulerTable0C1D2E3F": {
                "Type": "AWS::DynamoDB::Table",
                "Properties": {
                    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"},
                                  {"AttributeName": "sk", "KeyType": "RANGE"}],
                    "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"},
                                             {"AttributeName": "sk", "AttributeType": "S"}],
                    "BillingMode": "PAY_PER_REQUEST",
                    "StreamSpecification": {"StreamViewType": "NEW_AND_OLD_IMAGES"},
                    "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                },
            },
            "SchedulerDelayDlq11223344": {"Type": "AWS::SQS::Queue", "Properties": {"SqsManagedSseEnabled": True}},
            "SchedulerDelayQueue5A6B7C8D": {
                "Type": "AWS::SQS::Queue",
                "Properties": {
                    "VisibilityTimeout": 60,
                    "RedrivePolicy": {"deadLetterTargetArn": _arn("SchedulerDelayDlq11223344"),
                                      "maxReceiveCount": max_receives},
                },
            },
            "SchedulerDeliveryDlq55667788": {"Type": "AWS::SQS::Queue"},
            "SchedulerDeliveryQueueA1B2C3D4": {
                "Type": "AWS::SQS::Queue",
                "Properties": {"RedrivePolicy": {"deadLetterTargetArn": _arn("SchedulerDeliveryDlq55667788"),
                                                 "maxReceiveCount": 5}},
            },
            "SchedulerRejectedQueue99AA88BB": {"Type": "AWS::SQS::Queue"},
            RULE_DLQ: {"Type": "AWS::SQS::Queue", "Properties": {"SqsManagedSseEnabled": True}},
            "SchedulerRoleAAAA1111": {"Type": "AWS::IAM::Role", "Properties": {}},
            "SchedulerRuleF00DF00D": {
                "Type": "AWS::Events::Rule",
                "Properties": {
                    "ScheduleExpression": "cron(0 0 1 1 ? 2199)",
                    "State": "DISABLED",
                    "Description": {"Fn::Join": ["", ["Punctual poller trigger for ", {"Ref": "AWS::StackName"}]]},
                    "Targets": [{"Id": "Target0", "Arn": _arn("SchedulerPollerFn12345678"),
                                 "DeadLetterConfig": {"Arn": _arn(RULE_DLQ)}}],
                },
            },
            "SchedulerPollerFn12345678": _fn(poller, env),
            "SchedulerConsumerFn87654321": _fn(consumer, env),
            "SchedulerEditorFnABCDEF12": _fn(editor, env),
            "SchedulerConsumerSource0A0B0C0D": {
                "Type": "AWS::Lambda::EventSourceMapping",
                "Properties": {
                    "FunctionName": {"Ref": "SchedulerConsumerFn87654321"},
                    "EventSourceArn": _arn("SchedulerDelayQueue5A6B7C8D"),
                    "BatchSize": 10,
                    "FunctionResponseTypes": ["ReportBatchItemFailures"],
                },
            },
            "SchedulerEditorSource1A1B1C1D": {
                "Type": "AWS::Lambda::EventSourceMapping",
                "Properties": {
                    "FunctionName": {"Ref": "SchedulerEditorFnABCDEF12"},
                    "EventSourceArn": {"Fn::GetAtt": ["SchedulerTable0C1D2E3F", "StreamArn"]},
                    "BatchSize": 100,
                    "StartingPosition": "TRIM_HORIZON",
                    "FunctionResponseTypes": ["ReportBatchItemFailures"],
                    "BisectBatchOnFunctionError": True,
                    "MaximumRetryAttempts": 3,
                },
            },
        },
    }


TOPIC = "SchedulerControlTopicC0C0C0C0"
POLLER = "SchedulerPollerFn12345678"


def direct_template(**kw: Any) -> dict[str, Any]:
    """:func:`mini_template` in direct delivery, as the construct's ``delivery="direct"`` builds it:
    no delay queue (nor its DLQ), no consumer; a KMS-encrypted control topic the poller is
    subscribed to (with the rule's DLQ as its redrive DLQ), the topic as the poller's and the stream's OnFailure
    destination, and ``PUNCTUAL_CONTROL_TOPIC_ARN`` in the poller's and the editor's environment."""
    t = mini_template(**kw)
    r = t["Resources"]
    for lid in ("SchedulerDelayQueue5A6B7C8D", "SchedulerDelayDlq11223344", "SchedulerConsumerFn87654321",
                "SchedulerConsumerSource0A0B0C0D"):
        del r[lid]
    for fn in (POLLER, "SchedulerEditorFnABCDEF12"):
        env = r[fn]["Properties"]["Environment"]["Variables"] = dict(r[fn]["Properties"]["Environment"]["Variables"])
        del env[ENV["delay_queue_url"]]
        env[ENV["control_topic_arn"]] = {"Ref": TOPIC}
        env[ENV["delivery"]] = "direct"
    r[TOPIC] = {"Type": "AWS::SNS::Topic",
                "Properties": {"KmsMasterKeyId": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"},
                                                                     ":kms:us-east-1:123456789012:alias/aws/sns"]]}}}
    r["SchedulerControlTopicPolicy5E5E5E5E"] = {
        "Type": "AWS::SNS::TopicPolicy",
        "Properties": {"Topics": [{"Ref": TOPIC}], "PolicyDocument": {"Statement": [
            {"Effect": "Deny", "Principal": "*", "Action": "sns:Publish", "Resource": {"Ref": TOPIC},
             "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}}}
    r["SchedulerPollerControlSubscription7A7A7A7A"] = {
        "Type": "AWS::SNS::Subscription",
        "Properties": {"Protocol": "lambda", "TopicArn": {"Ref": TOPIC}, "Endpoint": _arn(POLLER),
                       "RedrivePolicy": {"deadLetterTargetArn": _arn(RULE_DLQ)}}}
    r["SchedulerPollerControlPermission8B8B8B8B"] = {
        "Type": "AWS::Lambda::Permission",
        "Properties": {"Action": "lambda:InvokeFunction", "FunctionName": _arn(POLLER),
                       "Principal": "sns.amazonaws.com", "SourceArn": {"Ref": TOPIC}}}
    r["SchedulerPollerInvokeConfig9C9C9C9C"] = {
        "Type": "AWS::Lambda::EventInvokeConfig",
        "Properties": {"FunctionName": {"Ref": POLLER}, "Qualifier": "$LATEST", "MaximumRetryAttempts": 2,
                       "DestinationConfig": {"OnFailure": {"Destination": {"Ref": TOPIC}}}}}
    r["SchedulerEditorSource1A1B1C1D"]["Properties"]["DestinationConfig"] = {
        "OnFailure": {"Destination": {"Ref": TOPIC}}}
    return t
