"""punctual.core is pure: importing every module pulls in neither boto3 nor botocore."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib, pkgutil, sys
import punctual.core as core
names = [m.name for m in pkgutil.walk_packages(core.__path__, "punctual.core.")]
for name in names:
    importlib.import_module(name)
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("boto3", "botocore"))
print(len(names), ",".join(bad))
"""


def test_core_imports_no_aws_sdk():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + SCRIPT],
                         capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout.split()
    count, bad = int(out[0]), (out[1] if len(out) > 1 else "")
    assert count >= 10  # the walk really found the modules
    assert bad == "", f"punctual.core imported {bad}"
