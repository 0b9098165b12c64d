"""``make dist``: the wheel and sdist build without a download (this venv's setuptools), pass
``twine check --strict`` and tests/packaging/check_dist.py, which installs the wheel alone into a fresh
virtual environment and imports it from there. Built from a copy of the tree (the in-tree ``build/`` of
setuptools would race with test_wheel.py's build)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.packaging.check_dist import problems

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """``make dist``'s build, from a copy of the tree."""
    tmp = tmp_path_factory.mktemp("dist")
    src = tmp / "src"
    for name in ("functions", "infra", "punctual"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
                   check=True, capture_output=True, timeout=300)
    return dist


def test_make_dist_builds_a_wheel_and_an_sdist_that_pass_twine_and_the_checks(built, monkeypatch):
    twine = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, built.iterdir())],
                           capture_output=True, text=True, timeout=120)
    assert twine.returncode == 0, twine.stdout + twine.stderr
    monkeypatch.chdir(built.parent)
    assert problems(Path(built.name)) == []  # a relative folder, as `make dist` gives it


def rewrite_wheel(dist: Path, out: Path, change: dict[str, bytes | None]) -> None:
    """A copy of ``dist`` (wheel and sdist) whose wheel has ``change``'s members replaced (None: removed)."""
    out.mkdir()
    for path in dist.iterdir():
        if not path.name.endswith(".whl"):
            shutil.copy(path, out / path.name)
            continue
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(out / path.name, "w") as dst:
            for item in src.infolist():
                data = change.get(item.filename, src.read(item))
                if data is not None:
                    dst.writestr(item, data)


def test_a_wheel_that_does_not_import_from_a_fresh_venv_fails_the_check(built, tmp_path):
    """The check installs and imports (Makefile: "the wheel installed in a fresh venv ... must import its
    construct module and CLI"): a wheel whose package fails to import fails it, which the file lists
    alone let through."""
    broken = tmp_path / "broken"
    rewrite_wheel(built, broken, {"punctual/cdk/__init__.py": b"raise ImportError('a broken construct module')\n"})
    assert problems(broken) == ["the wheel in a fresh venv: import punctual, punctual.client, punctual.cli, "
                                "punctual.cdk failed (1): ImportError: a broken construct module"]


def test_a_wheel_without_its_license_fails_the_check(built, tmp_path):
    bare = tmp_path / "bare"
    rewrite_wheel(built, bare, {"punctual_aws-0.1.0.dist-info/licenses/LICENSE": None})
    assert problems(bare) == ["the wheel lacks punctual_aws-0.1.0.dist-info/licenses/LICENSE"]


def test_the_makefile_runs_the_same_steps():
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("\ndist:"):].split("\n\n")[0]
    assert "-m build --no-isolation --outdir dist ." in recipe
    assert "twine check --strict dist/*" in recipe
    assert "-m tests.packaging.check_dist dist" in recipe
