"""cdk-nag (AwsSolutions) and cfn-lint on the synthesized templates."""

from __future__ import annotations

import json

import pytest


def _nag_violations(synth) -> list[str]:
    from cdk_nag import AwsSolutionsChecks

    report = AwsSolutionsChecks(synth.app).validate_scope(synth.stack)
    return [f"{v.rule_name} {[r.construct_path for r in v.violating_resources]}" for v in report.violations]


def test_demo_app_synth_runs_nag_as_a_validation_plugin(demo):
    """The demo fixture synthesized with ``Validations.of(app).add_plugins(AwsSolutionsChecks(app))``
    (cdk-nag 3.x): a finding would have failed the synth. The report confirms the plugin ran."""
    report = (demo.app.outdir + "/validation-report.json")
    with open(report) as f:
        data = json.load(f)
    assert data["title"] == "Validation Report"
    assert not [r for r in data["pluginReports"] if r.get("summary", {}).get("status") == "failure"]


# both delivery modes: direct deploys an SNS control topic (SNS2: KMS, SNS3: SSL only) instead of the delay queue
SYNTHS = ["demo", "custom", "direct", "direct_custom"]


@pytest.mark.parametrize("name", SYNTHS)
def test_aws_solutions_checks_pass(name, request):
    synth = request.getfixturevalue(name)
    assert _nag_violations(synth) == []


def test_nag_catches_findings():
    """Guard against a silently disabled check: an unsafe queue next to the construct is reported."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_sqs as sqs

    from .conftest import FAST_APP, NO_BUNDLING
    from .conftest import Synth as S

    app = App(context=NO_BUNDLING, **FAST_APP)
    stack = Stack(app, "Bad")
    sqs.Queue(stack, "Plain")
    assert any("AwsSolutions-SQS4" in v for v in _nag_violations(S(app, stack, None, None, {}, {})))


def test_every_acknowledgment_has_a_reason(demo, custom, direct, direct_custom):
    from aws_cdk import Validations

    key = Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    seen: dict[str, str] = {}
    for synth in (demo, custom, direct, direct_custom):
        for node in synth.stack.node.find_all():
            for entry in node.node.metadata:
                if entry.type == key:
                    seen.update({f"{node.node.path} {rule}": reason for rule, reason in entry.data.items()})
    rules = {k.split(" ", 1)[1].split("::", 1)[-1] for k in seen}
    # each one is justified in infra/construct.py (_acknowledge_nag_findings) and infra/app.py
    assert rules == {
        "AwsSolutions-SQS3",
        "AwsSolutions-L1",
        "AwsSolutions-IAM5[Resource::*]",
        "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
        "AwsSolutions-IAM5[Action::kms:ReEncrypt*]",
        # CDK's AwsCustomResource provider (resync_on_deploy), on its role only
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
    }
    for where, reason in seen.items():
        assert len(reason) > 40, f"acknowledgment without a real reason: {where}: {reason!r}"


@pytest.mark.parametrize("name", SYNTHS)
def test_cfn_lint_has_no_errors(name, request):
    from cfnlint.api import lint_all

    synth = request.getfixturevalue(name)
    matches = lint_all(json.dumps(synth.json))
    errors = [f"{m.rule.id} {m.message} {getattr(m, 'path', '')}" for m in matches if m.rule.severity == "error"]
    assert errors == []
    # Warnings allowed: only W3005 (CDK's explicit DependsOn next to a GetAtt), harmless.
    warnings = {m.rule.id for m in matches if m.rule.severity == "warning"}
    assert warnings <= {"W3005"}, warnings
