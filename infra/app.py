"""The cdk.json app: a demo stack with the Scheduler and an example consumer of its deliveries.

``python -m infra.app`` (``make synth``) writes ``cdk.out/``; ``npx aws-cdk synth`` runs the
same module through cdk.json. cdk-nag's AwsSolutions checks run at synth when cdk-nag is
installed (dev extra): a finding fails the synth unless acknowledged with a reason.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from aws_cdk import Acknowledgment, App, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from constructs import Construct

from .bundling import AssetBuildError
from .construct import Scheduler

# A consumer of delivered events, as small as it gets: log the id (dedupe key), due time and
# lateness; report failures per message so one bad message is retried alone.
EXAMPLE_CONSUMER = """
import json

def handler(event, context):
    failures = []
    for record in event["Records"]:
        try:
            body = json.loads(record["body"])
            print(json.dumps({"id": body["id"], "due": body["due"], "lateness_ms": body["lateness_ms"]}))
        except Exception:
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}
"""


class DemoStack(Stack):
    """Scheduler + a Lambda consuming the delivery queue + a role that may schedule tasks."""

    def __init__(self, scope: Construct, id: str, **kwargs: Any) -> None:
        super().__init__(scope, id, **kwargs)
        # A demo: tear everything down with the stack (production keeps the default RETAIN).
        self.scheduler = Scheduler(self, "Scheduler", removal_policy=RemovalPolicy.DESTROY)

        logs_group = logs.LogGroup(self, "ExampleConsumerLogs", retention=logs.RetentionDays.ONE_WEEK,
                                   removal_policy=RemovalPolicy.DESTROY)
        role = iam.Role(self, "ExampleConsumerRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        logs_group.grant_write(role)
        self.consumer = lambda_.Function(
            self,
            "ExampleConsumer",
            runtime=lambda_.Runtime.PYTHON_3_13,
            architecture=lambda_.Architecture.ARM_64,
            handler="index.handler",
            code=lambda_.Code.from_inline(EXAMPLE_CONSUMER),
            timeout=Duration.seconds(30),
            log_group=logs_group,
            role=role,
            description="Punctual demo: logs every delivered event",
        )
        # How a consumer subscribes: an SQS event source on the delivery queue
        # (it grants receive/delete itself; grant_consume does the same for other principals).
        self.consumer.add_event_source(
            sources.SqsEventSource(self.scheduler.delivery_queue, batch_size=10, report_batch_item_failures=True)
        )
        Validations.of(self.consumer).acknowledge(
            Acknowledgment(id="AwsSolutions-L1", reason="Demo pinned to the runtime the construct defaults to.")
        )

        # How a producer gets write access: any grantable (role, user, function).
        self.producer_role = iam.Role(
            self, "ExampleProducerRole", assumed_by=iam.AccountRootPrincipal(),
            description="Punctual demo: may schedule, list and cancel tasks",
        )
        self.scheduler.grant_schedule(self.producer_role)


def build_app(
    outdir: str | None = None, context: Mapping[str, Any] | None = None, nag: bool = True, **app_props: Any
) -> App:
    """The demo app; ``app_props`` go to :class:`aws_cdk.App` (tests turn off slow built-in checks)."""
    app = App(outdir=outdir, context=dict(context or {}), **app_props)
    DemoStack(app, "PunctualDemo", description="Punctual demo: precision one-off scheduler")
    if nag:
        try:
            from cdk_nag import AwsSolutionsChecks
        except ImportError:  # cdk-nag is a dev dependency
            pass
        else:
            # cdk-nag 3.x: a validation plugin (the Aspects API of 2.x is gone).
            Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main() -> None:
    # Under the CDK CLI, CDK_OUTDIR is set and App uses it; run directly, write ./cdk.out.
    outdir = None if os.environ.get("CDK_OUTDIR") else "cdk.out"
    try:
        build_app(outdir=outdir).synth()
    except AssetBuildError as exc:  # e.g. offline without the wheel cache: one line, no traceback
        print(f"punctual: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
