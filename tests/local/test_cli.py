"""CLI error paths: one line on stderr, a non-zero exit, never a traceback."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from punctual.cli import EXIT_NOT_FOUND, EXIT_UNREACHABLE, main
from punctual.cli.tasks import parse_payload
from punctual.client import PunctualClient
from punctual.local.stack import free_port
from tests.support import T0_MS

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


# ---- large payloads: --payload @FILE and --payload - (stdin) ------------------------------------

# Linux refuses one argument longer than MAX_ARG_STRLEN (32 pages: 131,072 bytes) with E2BIG: a payload
# past it cannot be a --payload argument at all, whatever the scheduler's own limit.
MAX_ARG_STRLEN = 131_072


def payload_of(size: int) -> dict:
    """A JSON object whose compact text is ``size`` bytes."""
    filler = size - len(json.dumps({"blob": ""}, separators=(",", ":")))
    return {"blob": "x" * filler}


def payload_source(via: str, text: str, tmp_path, monkeypatch) -> str:
    """The --payload argument that hands over ``text`` through a file (``@FILE``) or stdin (``-``)."""
    if via == "file":
        (tmp_path / "payload.json").write_text(text)
        return f"@{tmp_path / 'payload.json'}"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    return "-"


def _rows(stack):
    return stack.ddb.scan(TableName=stack.settings.table_name)["Items"]


@pytest.mark.parametrize("via", ["file", "stdin"])
def test_a_payload_past_the_shells_argument_limit_comes_from_a_file_or_stdin(capsys, tmp_path, stack, monkeypatch,
                                                                           via):
    """GIVEN a 200 KB payload (the shell cannot pass it as an argument; Punctual takes up to 252 KiB)
    WHEN scheduled with --payload @FILE or --payload - THEN the row holds it, every byte."""
    big = payload_of(200_000)
    text = json.dumps(big, separators=(",", ":"))
    assert len(text) == 200_000 > MAX_ARG_STRLEN
    if sys.platform.startswith("linux"):
        with pytest.raises(OSError, match="Argument list too long"):
            subprocess.run(["true", text], check=False)
    source = payload_source(via, text, tmp_path, monkeypatch)
    code, out, err = run(capsys, tmp_path, "schedule", "--in", "1h", "--id", "big", "--payload", source,
                         "--table", stack.settings.table_name)
    assert code == 0, err
    (row,) = _rows(stack)
    assert row["sk"]["S"].endswith("#big") and row["payload"]["M"]["blob"]["S"] == big["blob"]


@pytest.mark.parametrize("via", ["file", "stdin"])
def test_a_300_kb_payload_reaches_the_client_and_is_refused_as_oversize_in_one_line(capsys, tmp_path, stack,
                                                                                    monkeypatch, via):
    """300 KB is past Punctual's limit (258,048 bytes as JSON, an event <= 256 KiB): the client's one line
    says so (before: the shell refused the argument), and nothing is written."""
    text = json.dumps(payload_of(300_000), separators=(",", ":"))
    source = payload_source(via, text, tmp_path, monkeypatch)
    code, _, err = run(capsys, tmp_path, "schedule", "--in", "1h", "--payload", source,
                       "--table", stack.settings.table_name)
    assert code == 1
    assert one_line(err) == "punctual: error: invalid schedule: payload is 300000 bytes as JSON, limit 258048"
    assert _rows(stack) == []


def test_payload_file_and_stdin_errors_are_one_line(capsys, tmp_path, monkeypatch):
    endpoint = UNREACHABLE.format(port=free_port())  # never reached: the payload is read first

    def error(source: str, stdin: str = "") -> str:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code, _, err = run(capsys, tmp_path, "schedule", "--in", "1s", "--payload", source, "--table", "t",
                           "--endpoint-url", endpoint)
        assert code == 1
        return one_line(err)

    missing = tmp_path / "missing.json"
    assert error(f"@{missing}") == (f"punctual: error: bad --payload @{missing}: cannot read '{missing}': "
                                    "No such file or directory")
    (tmp_path / "bad.json").write_text('{\n  "a": 1,\n  "b": \n}\n')
    assert error(f"@{tmp_path / 'bad.json'}") == (
        f"punctual: error: bad --payload @{tmp_path / 'bad.json'}: not JSON (Expecting value at line 4 column 1)")
    assert error("-", stdin='{"a": ') == "punctual: error: bad --payload -: not JSON (Expecting value at character 6)"
    assert error("-", stdin="") == "punctual: error: bad --payload -: not JSON (Expecting value at character 0)"
    assert error("-", stdin="[1]") == "punctual: error: bad --payload -: must be a JSON object, got list"
    (tmp_path / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    assert "cannot read" in error(f"@{tmp_path / 'latin1.json'}")  # JSON is UTF-8


# ---- punctual get KEY | --id ID ------------------------------------------------------------------

def test_get_by_key_or_by_id(capsys, tmp_path, stack):
    """``get KEY`` shows the task; ``get --id ID`` (or a bare id) every pending task with that id,
    earliest first; one JSON object a line with --json; a key or id with no pending task exits 3."""
    table = stack.settings.table_name
    client = PunctualClient(table, ddb=stack.ddb, clock=stack.deps.clock)
    first = client.schedule(T0_MS + 3_600_000, {"n": 1}, id="order-42")
    second = client.schedule(T0_MS + 7_200_000, {"n": Decimal("2.50")}, id="order-42")
    client.schedule(T0_MS + 3_600_000, {"n": 3}, id="other")

    code, out, err = run(capsys, tmp_path, "get", second.key, "--table", table)
    assert code == 0, err
    assert out == f"{second.key}  2027-01-01T02:00:00.000Z  {{\"n\":2.50}}\n"
    for argv in (["--id", "order-42"], ["order-42"]):
        code, out, err = run(capsys, tmp_path, "get", *argv, "--table", table, "--json")
        assert code == 0, err
        assert [json.loads(line) for line in out.splitlines()] == [
            {"key": first.key, "due": "2027-01-01T01:00:00.000Z", "payload": {"n": 1}},
            {"key": second.key, "due": "2027-01-01T02:00:00.000Z", "payload": {"n": 2.5}}]
    code, _, err = run(capsys, tmp_path, "get", "--id", "nobody", "--table", table)
    assert code == EXIT_NOT_FOUND
    assert one_line(err) == "punctual: error: no scheduled task with id 'nobody' (already delivered or cancelled?)"
    gone = f"{T0_MS + 60_000}#nobody"
    code, _, err = run(capsys, tmp_path, "get", gone, "--table", table)
    assert code == EXIT_NOT_FOUND
    assert one_line(err) == f"punctual: error: not found: no pending task {gone!r}"
