"""Docker-free packaging: one real bundling (pip for the Lambda platform), plus the pure helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk import aws_lambda as lambda_

from infra.bundling import SOURCES, pinned_requirements, source_files, pip_arguments, pip_platform, python_version


def test_platform_follows_architecture():
    assert pip_platform(lambda_.Architecture.ARM_64) == "manylinux2014_aarch64"
    assert pip_platform(lambda_.Architecture.X86_64) == "manylinux2014_x86_64"


def test_python_version_follows_runtime():
    assert python_version(lambda_.Runtime.PYTHON_3_12) == "3.12"
    assert python_version(lambda_.Runtime.PYTHON_3_13) == "3.13"
    with pytest.raises(ValueError):
        python_version(lambda_.Runtime.NODEJS_20_X)


def test_pip_only_binary_wheels_for_the_target():
    args = pip_arguments("/out", "manylinux2014_aarch64", "3.13", ["pydantic==2.0"])
    assert args[args.index("--platform") + 1] == "manylinux2014_aarch64"
    assert args[args.index("--python-version") + 1] == "3.13"
    assert args[args.index("--implementation") + 1] == "cp"
    assert "--only-binary=:all:" in args and args[-1] == "pydantic==2.0"


def test_requirements_pinned_to_what_the_tests_ran():
    from importlib.metadata import version

    assert pinned_requirements() == [f"pydantic=={version('pydantic')}"]
    assert not any(r.startswith(("boto3", "botocore")) for r in pinned_requirements())  # the runtime has them


def test_real_bundling_for_arm64(tmp_path):
    """Synthesize with real local bundling: the asset holds ``functions`` and pydantic-core built
    for Lambda (CPython 3.13, aarch64), so a deploy would not fail at import time."""
    from aws_cdk import App, Stack

    from infra import Scheduler

    from .conftest import FAST_APP

    app = App(outdir=str(tmp_path), **FAST_APP)  # no bundling-stacks context: bundling is on
    stack = Stack(app, "Bundled")
    scheduler = Scheduler(stack, "S", alarms=False)
    assembly = app.synth()
    template = assembly.get_stack_by_name("Bundled").template
    keys = {r["Properties"]["Code"]["S3Key"] for r in template["Resources"].values()
            if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Runtime"].startswith("python")}
    assert len(keys) == 1, "one asset for the three functions"
    asset = tmp_path / ("asset." + next(iter(keys)).removesuffix(".zip"))
    assert asset.is_dir()

    # our code: the handlers and punctual.core, the same files as the source tree, no caches,
    # and nothing else of the package (client, CLI, local stack, benchmark are not for Lambda)
    ours = [asset / "functions", asset / "punctual"]
    shipped = {p.relative_to(asset).as_posix() for root in ours for p in root.rglob("*") if p.is_file()}
    assert shipped == set(source_files(SOURCES))
    assert (asset / "functions" / "poller" / "handler.py").is_file()
    assert (asset / "punctual" / "core" / "planning.py").is_file()
    assert not (asset / "punctual" / "client.py").exists() and not (asset / "punctual" / "bench").exists()
    assert not list(asset.rglob("__pycache__")), "no .pyc for the build machine's interpreter"
    assert not (asset / "boto3").exists()

    # pydantic and its compiled core, for the Lambda platform, not this machine
    assert (asset / "pydantic" / "__init__.py").is_file()
    (so,) = (asset / "pydantic_core").glob("_pydantic_core*.so")
    assert "cpython-313" in so.name and "aarch64" in so.name, so.name
    (dist,) = asset.glob("pydantic_core-*.dist-info")
    tags = [line.split(":", 1)[1].strip() for line in (dist / "WHEEL").read_text().splitlines()
            if line.startswith("Tag:")]
    assert tags and all(t.startswith("cp313-cp313-") and "aarch64" in t for t in tags), tags
    assert Path(so).read_bytes()[:4] == b"\x7fELF"
    # ELF e_machine 0xB7 = AArch64
    assert int.from_bytes(Path(so).read_bytes()[18:20], "little") == 0xB7

    # every Python file we ship is valid syntax (the runtime is newer than the tests' interpreter)
    for p in (p for root in ours for p in root.rglob("*.py")):
        compile(p.read_text(), str(p), "exec")
    manifest = json.loads((tmp_path / "Bundled.assets.json").read_text())
    assert manifest["files"], "the asset is registered for publishing"
    assert scheduler.poller_function.architecture.name == "arm64"
