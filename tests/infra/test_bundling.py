"""Docker-free packaging: one real bundling (pip for the Lambda platform), plus the pure helpers."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import stat
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

ROOT = Path(__file__).resolve().parents[2]


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


def test_every_third_party_package_is_pinned_to_what_the_tests_ran():
    """pydantic and everything it requires, each at exactly the version installed here: the asset hash
    covers the pip command, so it changes whenever a package's bytes could (pydantic alone, pinned,
    left typing-extensions and the others to whatever the index had that day)."""
    from importlib.metadata import version

    pins = pinned_requirements()
    names = [pin.split("==")[0] for pin in pins]
    assert {"pydantic", "pydantic-core", "typing-extensions", "annotated-types", "typing-inspection"} <= set(names)
    assert {_dist_key(n) for n in names} == _requirement_closure(RUNTIME_DISTRIBUTIONS)
    assert names == sorted(names) and all(pin == f"{n}=={version(n)}" for pin, n in zip(pins, names, strict=True))
    assert not any(r.startswith(("boto3", "botocore")) for r in pins)  # the runtime has them


def test_the_asset_hash_changes_with_any_pin():
    """The S3 key of the asset (its hash) moves when a dependency's pin does, not only pydantic's."""
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from infra.bundling import functions_code

    def key(reqs):
        stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "S")
        lambda_.Function(stack, "F", runtime=lambda_.Runtime.PYTHON_3_13, handler="x.handler",
                         code=functions_code(lambda_.Architecture.ARM_64, lambda_.Runtime.PYTHON_3_13, reqs,
                                             bundle=False))
        (fn,) = Template.from_stack(stack).find_resources("AWS::Lambda::Function").values()
        return fn["Properties"]["Code"]["S3Key"]

    base = pinned_requirements()
    bumped = [p.replace("typing-extensions==", "typing-extensions==0.") for p in base]
    assert bumped != base
    assert key(base) == key(list(base)) != key(bumped)


def test_an_offline_synth_stops_with_one_clear_line(tmp_path):
    """GIVEN no package index and no wheel cache WHEN the app is synthesized THEN one line says
    which wheels are missing and how to fix it: no jsii traceback, exit 1."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_NO_INDEX="1", PUNCTUAL_WHEEL_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT),
               JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="1", CDK_OUTDIR=str(tmp_path / "out"))
    proc = subprocess.run([sys.executable, "-m", "infra.app"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("punctual: ")]
    assert len(lines) == 1 and lines[0].startswith("punctual: cannot fetch the Lambda asset's wheels (")
    assert "PUNCTUAL_WHEEL_CACHE" in lines[0] and "manylinux2014_aarch64" in lines[0]
    assert "Traceback" not in proc.stderr and "jsii" not in proc.stderr.lower()


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
    # CDK makes the bundling folder world-writable (0o777, for Docker's user); the asset is not
    assert stat.S_IMODE(asset.stat().st_mode) == 0o755

    # our code: the handlers and punctual.core, the same files as the source tree, no caches,
    # and nothing else of the package (client, CLI, local stack, benchmark are not for Lambda)
    ours = [asset / "punctual"]
    files = [p for root in ours for p in root.rglob("*") if p.is_file()]
    shipped = {p.relative_to(asset).as_posix() for p in files if "__pycache__" not in p.parts}
    assert shipped == set(source_files(SOURCES))
    assert (asset / "punctual" / "functions" / "poller" / "handler.py").is_file()
    assert not (asset / "functions").exists()
    assert (asset / "punctual" / "core" / "planning.py").is_file()
    assert not (asset / "punctual" / "client").exists() and not (asset / "punctual" / "bench").exists()
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


def test_an_installed_but_inactive_python_of_the_runtimes_version_compiles_the_bytecode(tmp_path, monkeypatch):
    """GIVEN a synth run by another Python, and Python 3.99 installed by pyenv but not active (its shim
    on PATH fails) WHEN looking for an interpreter of the runtime's version THEN pyenv's is found."""
    fake = tmp_path / "pyenv" / "versions" / "3.99.2" / "bin" / "python3.99"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 3.99\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.delenv("PUNCTUAL_BYTECODE_PYTHON", raising=False)
    assert bytecode_python("3.99") == str(fake)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "none"))
    assert bytecode_python("3.99") is None
