"""``punctual local up``: its port check (TIME-WAIT sockets left by a stack just stopped do not count,
a socket listening there does, and that is known before the minute-long synthesis) and its options."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from punctual.cli import main
from punctual.local import LocalOptions, LocalStack, LocalStackError
from punctual.local import stack as stack_module
from punctual.local.stack import DEFAULT_PORT, free_port, port_free

HOST = "127.0.0.1"
TCP_TABLE = Path("/proc/net/tcp")
TIME_WAIT = "06"  # the state column of /proc/net/tcp


def time_wait_sockets(port: int) -> int:
    """Sockets in TIME-WAIT whose local end is ``HOST:port`` (Linux)."""
    local = f"0100007F:{port:04X}"
    rows = [line.split() for line in TCP_TABLE.read_text().splitlines()[1:]]
    return sum(1 for row in rows if row[1] == local and row[3] == TIME_WAIT)


def serve(port: int) -> Any:
    """The server moto runs (werkzeug's, as ThreadedMotoServer makes it), answering every request."""
    from werkzeug.serving import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log(self, *args: Any) -> None:
            pass

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    return make_server(HOST, port, app, threaded=True, request_handler=Quiet)


def leave_time_wait(port: int, requests: int = 20) -> None:
    """What a stopped local stack leaves: its server answered requests, closing its end of each
    connection first, so each end waits in TIME-WAIT (60 s on Linux) on the port; then it stopped."""
    server = serve(port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for _ in range(requests):
        with socket.create_connection((HOST, port), timeout=10) as client:
            client.sendall(b"GET / HTTP/1.0\r\n\r\n")  # HTTP/1.0: the server closes once it has answered
            answer = b""
            while chunk := client.recv(4096):  # until the server's end of the stream
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200 OK")
    server.shutdown()
    server.server_close()
    thread.join(10)
    deadline = time.monotonic() + 5
    while time_wait_sockets(port) < requests and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.skipif(not TCP_TABLE.exists(), reason="reads Linux's /proc/net/tcp")
def test_sockets_in_time_wait_on_the_port_do_not_make_it_in_use():
    """GIVEN 20 connections to the port closed by its server (as `local down` leaves it: 931 sockets were
    seen in TIME-WAIT after a demo) WHEN `local up` checks the port THEN it is free, and the server moto
    runs (werkzeug's, as ThreadedMotoServer makes it) binds it. Mutant: the check without SO_REUSEADDR."""
    port = free_port()
    leave_time_wait(port)
    assert time_wait_sockets(port) >= 20
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as plain, pytest.raises(OSError):
        plain.bind((HOST, port))  # the old check's bind: "port in use"

    assert port_free(HOST, port)
    server = serve(port)
    assert server.server_address[1] == port
    server.server_close()


@pytest.mark.parametrize("reuse", [False, True], ids=["plain", "reuseaddr"])
def test_a_port_something_listens_on_is_in_use(reuse):
    """A listening socket holds the port, also one bound with SO_REUSEADDR (another local stack's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        if reuse:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind((HOST, 0))
        other.listen(1)
        assert not port_free(HOST, other.getsockname()[1])


def test_local_up_on_a_port_in_use_fails_before_synthesizing(tmp_path, monkeypatch):
    """GIVEN a port another server listens on WHEN the local stack starts on it THEN it fails at once with
    the one line, before synthesizing the template (~28 s the first time) or starting anything.
    Mutant: the port checked after load_template (as it was)."""
    synthesized = []
    monkeypatch.setattr(stack_module, "load_template", lambda *a, **kw: synthesized.append(a) or {})
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind((HOST, 0))
        other.listen(1)
        port = other.getsockname()[1]
        stack = LocalStack(LocalOptions(port=port, state_dir=tmp_path / "state"), out=lambda *_: None)
        with pytest.raises(LocalStackError) as raised:
            stack.start()
    assert str(raised.value) == (f"port {port} on {HOST} is in use (another local stack? try --port, "
                                 f"or `punctual local down`)")
    assert synthesized == [] and stack.server is None
    assert not (tmp_path / "state" / "local.json").exists()


def test_local_up_help_lists_only_its_own_options_with_their_defaults(capsys, monkeypatch):
    monkeypatch.delenv("PUNCTUAL_LOCAL_PORT", raising=False)
    with pytest.raises(SystemExit) as done:
        main(["local", "up", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width
    options = {word.strip("[],") for word in text.split() if word.startswith(("--", "[--"))}
    assert options == {"--help", "--state-dir", "--port", "--template", "--cache-dir", "--state", "--no-state",
                       "--rule-delay", "--prop", "--env"}
    assert f"--port PORT port of the local endpoint on 127.0.0.1 (default: PUNCTUAL_LOCAL_PORT, else " \
           f"{DEFAULT_PORT})" in text
    assert "(default: PUNCTUAL_STATE_DIR, else .punctual)" in text


@pytest.mark.parametrize("argv", [["local", "down"], ["demo"]])
def test_the_other_stack_commands_take_no_client_options(argv, capsys):
    with pytest.raises(SystemExit):
        main([*argv, "--table", "t"])
    assert "unrecognized arguments: --table t" in capsys.readouterr().err


def test_the_client_commands_keep_their_target_options(capsys):
    with pytest.raises(SystemExit):
        main(["list", "--help"])
    out = capsys.readouterr().out
    assert all(flag in out for flag in ("--endpoint-url", "--table", "--partition", "--shards", "--region",
                                        "--state-dir"))
