"""`punctual probe` end to end on the local stack (in-process, on a construct-shaped template): it
creates its own queue, measures DelaySeconds 0 and 1, writes its file and deletes the queue; it never
touches the stack's queues or table; it refuses a non-local endpoint without --yes before making
any client; an interruption after its first send still deletes its queue."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import boto3
import pytest

from punctual.cli import main
from punctual.local import LocalOptions, LocalStack
from punctual.local.stack import free_port
from tests.local.templates import mini_template
from tests.local.test_cli import one_line

FAKE = "tests.local.fake_functions.handler"
SMALL = ["--delays", "0,1", "--samples", "2"]


@pytest.fixture
def local(tmp_path):
    path = tmp_path / "template.json"
    path.write_text(json.dumps(mini_template(poller=FAKE, consumer=FAKE, editor=FAKE)))
    stack = LocalStack(LocalOptions(port=free_port(), state_dir=tmp_path, template=path), out=lambda *_: None)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


class Calls(list):
    """Every AWS request made through boto3's default session (the CLI's clients): (service, operation,
    its parameters); ``on(event, handler)`` adds a hook of the test's on the same session."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[tuple[str, Any]] = []
        self.on("provide-client-params", self._record)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.append((model.service_model.service_name, model.name, dict(params)))

    def on(self, event: str, handler: Any) -> None:
        boto3._get_default_session().events.register(event, handler)
        self.hooks.append((event, handler))

    def off(self) -> None:
        for event, handler in self.hooks:
            boto3._get_default_session().events.unregister(event, handler)


@pytest.fixture
def calls():
    seen = Calls()
    yield seen
    seen.off()


def state(local: LocalStack) -> dict[str, Any]:
    """The stack's queues (and what each holds) and its table's items."""
    sqs, ddb = local.clients["sqs"], local.clients["dynamodb"]
    urls = sorted(sqs.list_queues().get("QueueUrls", []))
    depth = {u: sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["All"])["Attributes"] for u in urls}
    for attrs in depth.values():
        attrs.pop("LastModifiedTimestamp", None)
    table = local.settings.table_name
    return {"queues": depth, "items": ddb.scan(TableName=table)["Items"]}


def test_the_probe_measures_on_its_own_queue_and_leaves_the_stack_alone(local, tmp_path, capsys, calls):
    """GIVEN the local stack (local.json in the state dir), a task row in its table
    WHEN `punctual probe --delays 0,1 --samples 2` runs (no --yes: a local endpoint)
    THEN it creates punctual-probe-<hex>, sends 4 messages there and receives each once, deletes that
    queue, calls nothing else (no DynamoDB, no other queue), the stack's queues and table are as
    before, and the file has every sample and each delay's distribution: moto's timer is never early
    (its SentTimestamp is the send's ms, its first receive timestamp the receive's)."""
    local.clients["dynamodb"].put_item(TableName=local.settings.table_name,
                                       Item={"pk": {"S": "scheduler"}, "sk": {"S": "4102444800000#keep"}})
    before = state(local)
    out = tmp_path / "probe.json"

    code = main(["probe", *SMALL, "--state-dir", str(tmp_path), "--out", str(out), "--margin", "1000"])

    printed = capsys.readouterr().out
    assert code == 0, printed
    assert state(local) == before
    services = {service for service, _, _ in calls}
    assert services == {"sqs"}
    created = [p for _, op, p in calls if op == "CreateQueue"]
    assert len(created) == 1 and created[0]["QueueName"].startswith("punctual-probe-")
    mine = {p["QueueUrl"] for _, op, p in calls if "QueueUrl" in p}
    assert len(mine) == 1 and mine.isdisjoint(before["queues"])
    ops = [op for _, op, _ in calls]
    assert ops[0] == "CreateQueue" and ops[-1] == "DeleteQueue"
    assert ops.count("SendMessage") == 4 and ops.count("DeleteQueue") == 1
    assert not any(u.rsplit("/", 1)[-1].startswith("punctual-probe-")
                   for u in local.clients["sqs"].list_queues().get("QueueUrls", []))

    rep = json.loads(out.read_text())
    assert rep["queue"] == created[0]["QueueName"] and rep["endpoint"] == local.endpoint_url
    assert sorted(rep["by_delay"]) == ["0", "1"]
    for delay in ("0", "1"):
        d = rep["by_delay"][delay]["server"]
        assert (d["count"], d["missing"], d["early"]) == (2, 0, 0)
        assert 0 <= d["min"] <= d["p50"] <= d["p99"] <= d["max"] < 2000
    for s in rep["samples"]:
        assert s["first_receive_ms"] >= s["sent_ms"] + s["delay_s"] * 1000  # moto: never early
        assert s["send_start_ms"] <= s["send_end_ms"] and s["received_ms"] >= s["send_start_ms"] + s["delay_s"] * 1000
    assert rep["plan"]["wait_s"] == 0  # the local default: moto's long polls see a delayed message once a second
    assert rep["margin"]["covers"] is True
    assert "temporary queue punctual-probe-" in printed and "| 1 | 2 | 0 |" in printed
    assert "early margin (1000 ms) covers" in printed and f"written: {out}" in printed


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_an_interruption_after_the_first_send_deletes_the_queue(local, tmp_path, capsys, calls, how):
    """GIVEN the probe running on the local stack
    WHEN it is interrupted right after its first SendMessage (Ctrl-C, or a SIGTERM)
    THEN it exits 130, its queue is deleted, and it wrote no file. Mutant: no `finally` around the
    run (the queue stays); SIGTERM not turned into an interruption (the process would die)."""
    def interrupt(**_: Any) -> None:
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        else:
            raise KeyboardInterrupt

    calls.on("after-call.sqs.SendMessage", interrupt)
    out = tmp_path / "probe.json"
    code = main(["probe", *SMALL, "--state-dir", str(tmp_path), "--out", str(out)])

    assert code == 130
    assert "interrupted" in capsys.readouterr().err
    ops = [op for _, op, _ in calls]
    assert ops.count("SendMessage") == 1 and ops[-1] == "DeleteQueue"
    assert not any("punctual-probe-" in u for u in local.clients["sqs"].list_queues().get("QueueUrls", []))
    assert not out.exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the probe's handler is gone


@pytest.mark.parametrize("where", [["--endpoint-url", "http://192.0.2.10:4566"], ["--region", "eu-west-1"]])
def test_without_yes_a_non_local_endpoint_is_refused_before_any_client(tmp_path, capsys, monkeypatch, where):
    """GIVEN a non-local endpoint (an address of TEST-NET-1, or real AWS)
    WHEN `punctual probe` runs without --yes
    THEN it prints its plan (requests, price, duration), then one error line naming --yes, exits 1,
    and made no client (so no request). Mutant: the check after the clients are made."""
    made: list[Any] = []
    monkeypatch.setattr(boto3, "client", lambda *a, **kw: made.append(a) or pytest.fail("a client was made"))
    monkeypatch.delenv("PUNCTUAL_ENDPOINT_URL", raising=False)

    code = main(["probe", *where, "--state-dir", str(tmp_path)])

    out, err = capsys.readouterr()
    assert code == 1
    assert "--yes" in one_line(err) and "probe not started" in err
    assert "ReceiveMessage" in out and "$" in out and "takes at most" in out
    assert made == []


def test_the_margin_judged_is_the_deployments(tmp_path):
    """The probe judges the deployment's margin: PUNCTUAL_DIRECT_EARLY_MARGIN_MS, else local.json's for
    its endpoint (0 included), else the setting's default. Mutant: the first *true* value taken (a
    local.json's 0 would give the default)."""
    import argparse

    from punctual.cli.target import resolve_target
    from punctual.core.config import Settings

    args = argparse.Namespace(state_dir=str(tmp_path), endpoint_url=None, region=None, table=None, partition=None)
    assert resolve_target(args, {}).direct_early_margin_ms == Settings().direct_early_margin_ms
    local = {"endpoint_url": "http://127.0.0.1:1", "region": "us-east-1", "direct_early_margin_ms": 750}
    (tmp_path / "local.json").write_text(json.dumps(local))
    assert resolve_target(args, {}).direct_early_margin_ms == 750
    assert resolve_target(args, {"PUNCTUAL_DIRECT_EARLY_MARGIN_MS": "250"}).direct_early_margin_ms == 250
    (tmp_path / "local.json").write_text(json.dumps({**local, "direct_early_margin_ms": 0}))
    assert resolve_target(args, {}).direct_early_margin_ms == 0
