"""Importing any product module (the wheel's ``punctual``, the handlers, the construct) loads no
dev-only package: the test tools, moto (the local extra) and the benchmark's freezegun and
matplotlib are imported only when a command that needs them runs (docs/benchmark.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = ("moto", "freezegun", "pytest", "_pytest", "hypothesis", "matplotlib", "cdk_nag", "cfnlint")

SCRIPT = """
import importlib, pkgutil, sys
import functions, infra, punctual
names = [m.name for pkg in (punctual, functions, infra)
         for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")
         if not m.name.endswith(".__main__")]  # runs the CLI
for name in names:
    importlib.import_module(name)
bad = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
print(len(names), ",".join(bad))
"""


def test_no_product_module_imports_a_dev_only_package():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r})\n" + SCRIPT,
                          *DEV_ONLY], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout.split()
    count, bad = int(out[0]), (out[1] if len(out) > 1 else "")
    assert count >= 50  # the walk really found the modules (punctual.bench, punctual.local, functions ...)
    assert bad == "", f"imported at import time: {bad}"
