"""CLI error paths: one line on stderr, a non-zero exit, never a traceback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from punctual.cli import EXIT_NOT_FOUND, EXIT_UNREACHABLE, main
from punctual.cli.tasks import parse_payload
from punctual.local.stack import free_port

REPO = Path(__file__).resolve().parents[2]
HAS_EDITOR = importlib.util.find_spec("punctual.client") is not None


def run(capsys, tmp_path, *argv):
    code = main([*argv, "--state-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("punctual: error: ")
    return lines[0]


UNREACHABLE = "http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["schedule", "--in", "5x"], "bad duration"),
        (["schedule", "--at", "2027-01-01T00:00:00"], "no zone"),
        (["schedule", "--at", "tomorrow"], "bad time"),
        (["schedule", "--at", "2300-01-01T00:00:00Z"], "2199"),
        (["schedule", "--in", "1s", "--payload", "{bad"], "not JSON"),
        (["schedule", "--in", "1s", "--payload", "[1, 2]"], "JSON object"),
        (["reschedule", "1798761600000#a", "--in", "soon"], "bad duration"),
        (["list", "--from", "yesterday"], "bad time"),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, argv, needle):
    endpoint = UNREACHABLE.format(port=free_port())
    code, _, err = run(capsys, tmp_path, *argv, "--table", "t", "--endpoint-url", endpoint)
    assert code != 0
    assert needle in one_line(err)


@pytest.mark.parametrize(
    "argv",
    [["status"], ["cancel", "some-id"], ["watch", "--timeout", "1"]]
    + ([["list"], ["schedule", "--in", "1s"], ["cancel", "1798761600000#x"]] if HAS_EDITOR else []),
)
def test_unreachable_endpoint(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.setenv("PUNCTUAL_DELIVERY_QUEUE_URL", "http://127.0.0.1:1/123456789012/q")
    endpoint = UNREACHABLE.format(port=free_port())
    code, _, err = run(capsys, tmp_path, *argv, "--table", "t", "--endpoint-url", endpoint)
    assert code == EXIT_UNREACHABLE
    assert "cannot reach" in one_line(err)


def test_no_table_configured(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("PUNCTUAL_TABLE_NAME", raising=False)
    code, _, err = run(capsys, tmp_path, "status", "--endpoint-url", UNREACHABLE.format(port=free_port()))
    assert code != 0 and "no table" in one_line(err)


def test_unknown_ids(capsys, tmp_path, stack):
    # moto in-process (mock_aws): the CLI's boto3 clients hit it without an endpoint
    table = stack.settings.table_name
    code, _, err = run(capsys, tmp_path, "cancel", "no-such-id", "--table", table)
    assert code == EXIT_NOT_FOUND and "no-such-id" in one_line(err)
    code, _, err = run(capsys, tmp_path, "reschedule", "no-such-id", "--in", "5m", "--table", table)
    assert code == EXIT_NOT_FOUND
    one_line(err)
    if HAS_EDITOR:
        code, _, err = run(capsys, tmp_path, "cancel", "1798761600000#nope", "--table", table)
        assert code == EXIT_NOT_FOUND
        one_line(err)


def test_missing_table_is_one_line(capsys, tmp_path, stack):
    code, _, err = run(capsys, tmp_path, "status", "--table", "no-such-table")
    assert code == EXIT_NOT_FOUND and "not found" in one_line(err)


def test_local_down_without_a_stack(capsys, tmp_path):
    code, _, err = run(capsys, tmp_path, "local", "down")
    assert code != 0 and "no local stack running" in one_line(err)


def test_parse_payload():
    assert parse_payload(None) == {}
    assert parse_payload('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    # every digit of a number reaches the row (invariant 9), not a float's 17
    assert str(parse_payload('{"pi": 3.1415926535897932384626433832795028841}')["pi"]) == (
        "3.1415926535897932384626433832795028841")


def test_a_real_process_prints_no_traceback(tmp_path):
    endpoint = UNREACHABLE.format(port=free_port())
    for argv in (["schedule", "--in", "1s", "--payload", "{"], ["status"]):
        proc = subprocess.run(
            [sys.executable, "-m", "punctual", *argv, "--table", "t", "--endpoint-url", endpoint,
             "--state-dir", str(tmp_path)],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode != 0
        one_line(proc.stderr)


def test_rule_delay_option():
    import argparse

    from punctual.cli.local import _rule_delay

    assert _rule_delay("2.5") == 2.5
    assert _rule_delay("random") is None
    for bad in ("60", "-1", "soon"):
        with pytest.raises(argparse.ArgumentTypeError):
            _rule_delay(bad)


def test_local_up_refuses_a_second_stack_on_the_same_state_dir(capsys, tmp_path):
    import os

    (tmp_path / "local.pid").write_text(str(os.getppid()))  # a live process that is not us
    code, _, err = run(capsys, tmp_path, "local", "up", "--port", str(free_port()))
    assert code != 0 and "already running" in one_line(err)


def test_shards_put_a_task_in_its_ids_shard_and_status_counts_every_shard(capsys, tmp_path, stack, monkeypatch):
    import json

    table = stack.settings.table_name
    monkeypatch.delenv("PUNCTUAL_SHARDS", raising=False)
    code, out, err = run(capsys, tmp_path, "schedule", "--in", "1h", "--id", "order-42", "--table", table,
                         "--shards", "4")
    assert code == 0, err
    rows = stack.ddb.scan(TableName=table)["Items"]
    assert [r["pk"]["S"] for r in rows] == ["scheduler#2"]  # crc32(b"order-42") % 4
    monkeypatch.setenv("PUNCTUAL_SHARDS", "4")  # the environment serves as well as the flag
    code, out, err = run(capsys, tmp_path, "status", "--table", table, "--json")
    assert code == 0, err
    status = json.loads(out)
    assert status["shards"] == 4 and status["pending"] == 1
    code, out, _ = run(capsys, tmp_path, "status", "--table", table)
    assert "4 shards" in out
    code, _, err = run(capsys, tmp_path, "cancel", rows[0]["sk"]["S"], "--table", table)
    assert code == 0, err
    assert stack.ddb.scan(TableName=table)["Items"] == []
    monkeypatch.setenv("PUNCTUAL_SHARDS", "65")
    code, _, err = run(capsys, tmp_path, "status", "--table", table)
    assert code != 0 and "shards must be 1..64" in one_line(err)


def test_the_cli_client_knows_the_deployments_delivery_and_window(tmp_path):
    """A task taken out after its send (direct delivery) is named AlreadyEnqueued by a client told the
    deployment's delivery and window: the CLI reads them from the environment (or local.json)."""
    import argparse

    from punctual.cli.target import resolve_target

    args = argparse.Namespace(state_dir=str(tmp_path), endpoint_url=None, region=None, table="t", partition=None)
    target = resolve_target(args, {"PUNCTUAL_DELIVERY": "direct", "PUNCTUAL_WINDOW_SECONDS": "300"})
    c = target.client()
    assert (c.settings.delivery, c.settings.window_seconds) == ("direct", 300)
    default = resolve_target(args, {}).client()
    assert (default.settings.delivery, default.settings.window_seconds) == ("consumer", 900)
