"""docs/construct.md agrees with the synthesized templates: its IAM tables (the default mode's and
direct delivery's) are exactly the roles' privileges, and its alarm table names every alarm with its
missing-data behaviour (and which ones direct delivery does not create)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

DOC = (Path(__file__).resolve().parents[2] / "docs" / "construct.md").read_text()


def table_after(marker: str) -> list[list[str]]:
    """The rows (cells, stripped) of the first Markdown table after ``marker``, header excluded."""
    lines = DOC[DOC.index(marker):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _resource_names(demo) -> dict[str, str]:
    """Each resource a role may name, as JSON -> its name in the doc's table (``demo``: either mode's synth)."""
    s, d = demo.scheduler, demo

    def arn(construct, attr="Arn"):
        return json.dumps({"Fn::GetAtt": [d.logical_id(construct), attr]}, sort_keys=True)

    names = {arn(s.table): "table", arn(s.table, "StreamArn"): "table stream", json.dumps("*"): "`*`",
             arn(s.rejected_queue): "rejected-rows queue",
             arn(s.delivery_queue): "delivery queue", arn(s.poller_function): "poller function"}
    if s.delay_queue is not None:
        names[arn(s.delay_queue)] = "delay queue"
    if s.control_topic is not None:
        names[json.dumps({"Ref": d.logical_id(s.control_topic)})] = "control topic"
    for fn in s.functions:
        group = d.json["Resources"][d.logical_id(fn)]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        names[json.dumps({"Fn::GetAtt": [group, "Arn"]}, sort_keys=True)] = "its log group"
    return names


def template_privileges(demo) -> set[tuple[str, str, str]]:
    """(role, action, resource name) for the three functions' roles and the resync provider's."""
    s = demo.scheduler
    roles = {json.dumps({"Ref": demo.logical_id(fn.role)}): fn.node.id.lower() for fn in s.functions}
    provider = s.resync.grant_principal.node.default_child  # the singleton provider's role
    roles[json.dumps({"Ref": demo.stack.get_logical_id(provider)})] = "resync provider"
    names = _resource_names(demo)
    out = set()
    for policy in demo.resources("AWS::IAM::Policy").values():
        (role,) = [roles[json.dumps(r)] for r in policy["Properties"]["Roles"] if json.dumps(r) in roles] or [None]
        if role is None:
            continue
        for st in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            # the rule's ARN is built from its fixed name (an Fn::Join ending in ":rule/<name>")
            resources_named = ["rule" if "Fn::Join" in r and ":rule/" in json.dumps(r) else
                               names[json.dumps(r, sort_keys=True)] for r in resources]
            out |= {(role, a, r) for a in actions for r in resources_named}
    return out


def doc_privileges(marker: str = "- **IAM**") -> set[tuple[str, str, str]]:
    out = set()
    for role, actions, on, _why in table_after(marker):
        targets = [t.strip() for t in on.split(",")]
        out |= {(role, a, t) for a in ticked(actions) for t in targets}
    return out


def test_the_iam_table_is_the_templates(demo):
    assert doc_privileges() == template_privileges(demo)


def test_the_direct_delivery_iam_table_is_the_templates(direct):
    assert doc_privileges('- **IAM with `delivery="direct"`**') == template_privileges(direct)


def test_the_consumer_reads_no_batchgetitem_and_the_doc_says_so(demo):
    """The doc once listed BatchGetItem for the consumer, a call the code never makes."""
    assert not any(a == "dynamodb:BatchGetItem" for _, a, _ in doc_privileges() | template_privileges(demo))


def test_the_alarm_table_names_every_alarm_and_its_missing_data_behaviour(demo):
    rows = table_after("Alarms (`alarms=True`)")
    documented = {alarm_id: row[3] for row in rows for alarm_id in ticked(row[0])}
    words = {"notBreaching": "not breaching", "breaching": "breaching", "ignore": "ignore", "missing": "missing"}
    template = demo.json["Resources"]
    actual = {a.node.id: words[template[demo.logical_id(a)]["Properties"]["TreatMissingData"]]
              for a in demo.scheduler.alarms}
    assert documented == actual


def test_the_doc_names_the_alarms_direct_delivery_does_not_create(demo, direct):
    sentence = DOC[DOC.index('With `delivery="direct"` there is no delay queue'):].split("\n\n")[0]
    absent = set(ticked(sentence.split("The others")[0])) - {'delivery="direct"'}
    assert absent == {a.node.id for a in demo.scheduler.alarms} - {a.node.id for a in direct.scheduler.alarms}
    assert {a.node.id for a in direct.scheduler.alarms} < {a.node.id for a in demo.scheduler.alarms}


def test_no_alarm_uses_math_that_can_lack_data(demo, custom):
    """Every alarm's metric has data whenever its source reports: either one metric, or math whose
    every metric is FILLed (a bare d0 + d1 has no data while either queue is inactive)."""
    for synth in (demo, custom):
        for lid, alarm in synth.resources("AWS::CloudWatch::Alarm").items():
            for query in alarm["Properties"].get("Metrics", []):
                if "Expression" in query:
                    ids = [q["Id"] for q in alarm["Properties"]["Metrics"] if "MetricStat" in q]
                    for metric_id in ids:
                        assert f"FILL({metric_id}, 0)" in query["Expression"], (lid, query["Expression"])


def _seconds(cell: str) -> int:
    value, unit = cell.split()
    return int(value) * {"s": 1, "min": 60}[unit]


def test_the_sizing_table_is_the_templates(demo, direct):
    """docs/construct.md's "Sizing rationale": each function's timeout and memory as synthesized (the
    editor's timeout was documented as 60 s while the template said 20 s)."""
    documented = {row[0]: (_seconds(row[1]), int(row[2].removesuffix(" MB"))) for row in table_after("## Sizing rationale")}
    for synth in (demo, direct):
        s = synth.scheduler
        functions = {"poller": s.poller_function, "editor": s.editor_function}
        if s.consumer_function is not None:  # not deployed with delivery="direct"
            functions["consumer"] = s.consumer_function
        for name, fn in functions.items():
            props = synth.json["Resources"][synth.logical_id(fn)]["Properties"]
            assert documented[name] == (props["Timeout"], props["MemorySize"]), name
    assert set(documented) == {"poller", "consumer", "editor"}


CLIENT_DOC = (Path(__file__).resolve().parents[2] / "docs" / "client.md").read_text()


def test_the_clients_iam_sentence_names_the_actions_grant_schedule_grants():
    """docs/client.md names IAM actions that exist and that grant_schedule grants (it once listed
    TransactWriteItems, which is an API call, not an IAM action: a transaction needs its items')."""
    from infra.construct import FENCE_CHECK_ACTIONS, SCHEDULE_ACTIONS

    sentence = CLIENT_DOC[CLIENT_DOC.index("The caller needs"):].split("\n\n")[0]
    named = {a for a in ticked(sentence) if a.startswith("dynamodb:")}
    assert named == set(SCHEDULE_ACTIONS) | set(FENCE_CHECK_ACTIONS)
    assert "dynamodb:TransactWriteItems" not in named


def test_the_first_example_synthesizes_as_the_cdk_cli_runs_it(tmp_path):
    """docs/construct.md's first example is a whole app.py: run as `cdk synth` runs it (the CLI passes
    its output folder in CDK_OUTDIR and its context in CDK_CONTEXT_JSON; bundling skipped here), it
    writes MyStack's template there, with the Scheduler, the producer's grant and the consumer's source."""
    section = DOC[DOC.index("## Add it to an existing stack"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("```\n", 10)]
    (tmp_path / "app.py").write_text(code)
    out = tmp_path / "cdk.out"
    env = {**os.environ, "CDK_OUTDIR": str(out), "CDK_CONTEXT_JSON": json.dumps({"aws:cdk:bundling-stacks": []}),
           "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "1"}
    proc = subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resources = json.loads((out / "MyStack.template.json").read_text())["Resources"]
    types = [r["Type"] for r in resources.values()]
    assert types.count("AWS::DynamoDB::Table") == 1 and types.count("AWS::Events::Rule") == 1
    (api_policy,) = [r for lid, r in resources.items() if r["Type"] == "AWS::IAM::Policy" and lid.startswith("ApiServiceRole")]
    actions = {a for st in api_policy["Properties"]["PolicyDocument"]["Statement"] for a in st["Action"]}
    assert "dynamodb:PutItem" in actions
    (worker,) = [lid for lid, r in resources.items() if r["Type"] == "AWS::Lambda::Function" and lid.startswith("Worker")]
    (mapping,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"
                  and r["Properties"]["FunctionName"] == {"Ref": worker}]
    assert mapping["EventSourceArn"]["Fn::GetAtt"][0].startswith("SchedulerDeliveryQueue")
