"""The wheel a user installs: one import package, and a construct that bundles Punctual's code
even inside a CDK project that has ``functions/``, ``infra/`` and ``core/`` packages of its own.

GIVEN the wheel built from this tree, installed into a fresh virtual environment as ``make dist``
checks it (tests/packaging/check_dist.install_alone: its dependencies, aws-cdk-lib among them, are
borrowed from this repository's ``.venv`` through a ``.pth`` line, so nothing is downloaded but the
Lambda wheels the real bundling fetches, as in tests/infra/test_bundling.py),
WHEN a user project with its own ``functions``, ``infra`` and ``core`` packages synthesizes a
stack with ``punctual.cdk.Scheduler`` and a Lambda of its own,
THEN the scheduler's asset holds Punctual's handlers and ``punctual.core`` and the user's asset
the user's code, and the three handlers import from the asset alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from setuptools import find_packages

from tests.packaging.check_dist import clean_environment, install_alone

ROOT = Path(__file__).resolve().parents[2]
USER_MARK = "USER-PROJECT-CODE"

USER_APP = """
import functions, infra, core   # the user's own packages, first on sys.path (the script's folder)
assert functions.MARK == infra.MARK == core.MARK == "{mark}"
from aws_cdk import App, Stack, aws_lambda as lambda_
from punctual.cdk import Scheduler

app = App(outdir="cdk.out", context={{"@aws-cdk/core:stackTraces": False}})
stack = Stack(app, "UserStack")
Scheduler(stack, "Scheduler", alarms=False, resync_on_deploy=False)
lambda_.Function(stack, "Mine", runtime=lambda_.Runtime.PYTHON_3_13, handler="functions.handler.handler",
                 code=lambda_.Code.from_asset("functions"))
app.synth()
"""


def _run(cmd: list[str], **kw) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_environment(), check=False, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
          "--wheel-dir", str(out), str(ROOT)])
    (built,) = out.glob("punctual_aws-*.whl")
    return built


def test_the_package_list_is_the_tree():
    """pyproject lists the packages by hand (two are mapped from infra/ and functions/): none missing."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    tree = {"punctual" + ("." + p if p else "") for p in ["", *find_packages(str(ROOT / "punctual"))]}
    tree |= {"punctual.cdk"} | {f"punctual.{p}" for p in find_packages(str(ROOT), include=["functions*"])}
    assert listed == tree


def test_wheel_installs_one_import_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"punctual"}
    for shipped in ("punctual/cdk/construct.py", "punctual/cdk/_props.py", "punctual/cdk/_observability.py",
                    "punctual/cdk/bundling.py", "punctual/core/planning.py",
                    "punctual/functions/poller/handler.py", "punctual/functions/consumer/handler.py",
                    "punctual/functions/editor/handler.py", "punctual/client/__init__.py",
                    "punctual/client/table.py"):
        assert shipped in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "Name: punctual-aws" in zipfile.ZipFile(wheel).read(meta).decode()


def test_user_project_with_its_own_functions_infra_and_core(wheel, tmp_path):
    # GIVEN a fresh venv with the wheel; its dependencies come from this repo's venv
    installed = install_alone(wheel, tmp_path / "venv")
    assert installed.returncode == 0, installed.stderr
    python = tmp_path / "venv" / "bin" / "python"

    # ... and a user project whose packages share the names Punctual's repository uses
    project = tmp_path / "project"
    for pkg in ("functions", "infra", "core"):
        (project / pkg).mkdir(parents=True)
        (project / pkg / "__init__.py").write_text(f'MARK = "{USER_MARK}"\n')
    (project / "functions" / "handler.py").write_text(f'def handler(event, context):\n    return "{USER_MARK}"\n')
    (project / "app.py").write_text(USER_APP.format(mark=USER_MARK))

    # WHEN it synthesizes (real bundling)
    _run([str(python), "app.py"], cwd=project)

    # THEN each function's asset holds the right code
    template = json.loads((project / "cdk.out" / "UserStack.template.json").read_text())
    assets = {name: project / "cdk.out" / ("asset." + r["Properties"]["Code"]["S3Key"].removesuffix(".zip"))
              for name, r in template["Resources"].items() if r["Type"] == "AWS::Lambda::Function"}
    mine = next(path for name, path in assets.items() if name.startswith("Mine"))
    ours = {path for name, path in assets.items() if name.startswith("Scheduler")}
    assert len(ours) == 1, "one asset for the three Punctual functions"
    (asset,) = ours
    assert USER_MARK in (mine / "handler.py").read_text()
    assert not (mine / "punctual").exists()
    for handler in ("poller", "consumer", "editor"):
        text = (asset / "punctual" / "functions" / handler / "handler.py").read_text()
        assert USER_MARK not in text and "punctual.core" in text
    assert (asset / "punctual" / "core" / "planning.py").is_file()
    assert not any((asset / name).exists() for name in ("functions", "core", "infra"))

    # ... and the handlers import from the asset alone (pydantic from this venv: the bundled one is
    # built for Lambda's platform). -S: no site-packages, so no editable install of this repository.
    probe = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
             "import punctual.functions.poller.handler as p, punctual.functions.consumer.handler as c\n"
             "import punctual.functions.editor.handler as e\n"
             "assert all(callable(m.handler) for m in (p, c, e))\n"
             "import punctual.core; assert punctual.core.__file__.startswith(sys.argv[2]), punctual.core.__file__\n"
             "print('ok')")
    deps = sysconfig.get_paths()["purelib"]
    assert _run([sys.executable, "-S", "-c", probe, deps, str(asset)], cwd=tmp_path).strip() == "ok"
