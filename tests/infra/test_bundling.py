"""Docker-free packaging: one real bundling (pip for the Lambda platform), plus the pure helpers."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
from pathlib import Path

import pytest
from aws_cdk import aws_lambda as lambda_

from infra.bundling import (
    RUNTIME_DISTRIBUTIONS,
    SOURCES,
    LocalPythonBundling,
    bytecode_python,
    pinned_requirements,
    pip_arguments,
    pip_platform,
    python_version,
    source_files,
)


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
    ours = [asset / "punctual"]
    files = [p for root in ours for p in root.rglob("*") if p.is_file()]
    shipped = {p.relative_to(asset).as_posix() for p in files if "__pycache__" not in p.parts}
    assert shipped == set(source_files(SOURCES))
    assert (asset / "punctual" / "functions" / "poller" / "handler.py").is_file()
    assert not (asset / "functions").exists()
    assert (asset / "punctual" / "core" / "planning.py").is_file()
    assert not (asset / "punctual" / "client.py").exists() and not (asset / "punctual" / "bench").exists()
    assert not (asset / "punctual" / "local").exists()
    # third party: pydantic and what it requires, nothing dev-only (moto, freezegun, pytest, ...)
    dists = {_dist_key(p.name.split("-")[0]) for p in asset.glob("*.dist-info")}
    assert "pydantic" in dists and dists <= _requirement_closure(RUNTIME_DISTRIBUTIONS), dists
    top = {p.name.removesuffix(".py") for p in asset.iterdir() if not p.name.endswith(".dist-info")}
    assert not top & DEV_ONLY, top & DEV_ONLY
    # bytecode only from an interpreter of the runtime's version (3.13), never the build machine's
    pyc = list(asset.rglob("*.pyc"))
    if bytecode_python("3.13") is None:
        assert not pyc
    else:
        assert pyc and all(".cpython-313." in p.name for p in pyc)
        assert (asset / "punctual" / "functions" / "poller" / "__pycache__" / "handler.cpython-313.pyc").is_file()
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


def test_bytecode_python_is_checked_by_running_it(tmp_path):
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert bytecode_python(here) is not None
    assert bytecode_python("3.99") is None
    # a shim that is on PATH but fails (pyenv, for a version that is not active) is not taken
    shim = tmp_path / "python3.99"
    shim.write_text("#!/bin/sh\nexit 127\n")
    shim.chmod(0o755)
    assert bytecode_python("3.99", candidates=[str(shim)]) is None


def test_bundle_compiles_unchecked_hash_bytecode(tmp_path):
    """GIVEN an interpreter of the runtime's version, WHEN bundling, THEN every module has a .pyc the
    runtime uses without comparing source timestamps (flags 0b01: hash-based, unchecked)."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    bundling = LocalPythonBundling(platform="manylinux2014_x86_64", python_version=here, requirements=[],
                                   compile_with=bytecode_python(here))
    assert bundling.try_bundle(str(tmp_path))
    tag = sys.implementation.cache_tag
    pyc = tmp_path / "punctual" / "core" / "__pycache__" / f"planning.{tag}.pyc"
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01
    modules = [p for p in tmp_path.rglob("*.py")]
    assert modules and all((p.parent / "__pycache__" / f"{p.stem}.{tag}.pyc").is_file() for p in modules)


# ---- nothing dev-only in the Lambda asset ------------------------------------------------------

#: Packages for development, the local stack or the benchmark: never in (or imported by) the asset.
DEV_ONLY = {"moto", "freezegun", "pytest", "_pytest", "hypothesis", "matplotlib", "aws_cdk", "constructs",
            "jsii", "cdk_nag", "cfnlint", "mypy", "ruff", "responses", "werkzeug", "flask"}
#: What the asset's code may import: itself, the runtime's boto3/botocore, pydantic (bundled).
ASSET_IMPORTS = {"punctual.core", "punctual.functions", "boto3", "botocore", "pydantic"}


def _dist_key(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _requirement_closure(names) -> set[str]:
    """The installed distributions ``names`` need, transitively (requirements of extras left out)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = _dist_key(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for req in importlib.metadata.requires(name) or []:
            if "extra ==" not in req:
                todo.append(re.match(r"[A-Za-z0-9._-]+", req).group(0))
    return seen


def _imports(path: Path) -> set[str]:
    """The absolute imports of a file, lazy ones (inside functions) too, but not those under
    ``if TYPE_CHECKING:``; relative imports stay inside the shipped package."""
    tree = ast.parse(path.read_text(), str(path))
    checking = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING"
                for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in checking:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module)
    return out


def test_the_asset_code_imports_nothing_dev_only():
    """Statically, lazy imports included: the asset's code reaches only the standard library,
    punctual.core / punctual.functions, the runtime's boto3 and the bundled pydantic. A lazy
    ``import freezegun`` in punctual.core would pass every import-time check and fail on Lambda."""
    py = [p for name, p in source_files(SOURCES).items() if name.endswith(".py")]
    assert len(py) >= 10
    bad = {}
    for path in py:
        for module in _imports(path):
            name = re.sub(r"^functions(?=\.|$)", "punctual.functions", module)  # as the asset names it
            if name.split(".")[0] in sys.stdlib_module_names | {"__future__"} or name == "punctual":
                continue
            if not any(name == a or name.startswith(a + ".") for a in ASSET_IMPORTS):
                bad.setdefault(str(path), []).append(module)
    assert not bad, bad
