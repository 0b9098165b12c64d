"""``make dist``: the wheel and sdist build without a download (this venv's setuptools), pass
``twine check --strict`` and tests/packaging/check_dist.py. Built from a copy of the tree (the
in-tree ``build/`` of setuptools would race with test_wheel.py's build)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.packaging.check_dist import problems

ROOT = Path(__file__).resolve().parents[2]


def test_make_dist_builds_a_wheel_and_an_sdist_that_pass_twine_and_the_checks(tmp_path):
    src = tmp_path / "src"
    for name in ("functions", "infra", "punctual"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True, timeout=300)
    twine = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
                           capture_output=True, text=True, timeout=120)
    assert twine.returncode == 0, twine.stdout + twine.stderr
    assert problems(dist) == []


def test_the_makefile_runs_the_same_steps():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\ndist:"):].split("\n\n")[0]
    assert "-m build --no-isolation --outdir dist ." in recipe
    assert "twine check --strict dist/*" in recipe
    assert "-m tests.packaging.check_dist dist" in recipe
