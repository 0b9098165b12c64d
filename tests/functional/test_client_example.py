"""docs/client.md's example stays runnable."""

from __future__ import annotations

import runpy
from pathlib import Path


def test_client_example_runs(capsys):
    runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / "client_moto.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "scheduled" in out and "refused" in out and "cancelled" in out
