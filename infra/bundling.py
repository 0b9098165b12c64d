"""Docker-free packaging of the Lambda code: the handlers, :mod:`punctual.core` and third-party wheels.

:class:`LocalPythonBundling` implements CDK's ``ILocalBundling``: CDK calls
:meth:`try_bundle` with an empty output directory; we copy the handlers (``functions/``)
and the code they run (``punctual/__init__.py`` and ``punctual/core/``, nothing else of
the package: no client, CLI, local stack or benchmark) there and let pip install the
runtime dependencies as *binary wheels for
the Lambda platform* (``manylinux2014_aarch64`` or ``manylinux2014_x86_64``, the
runtime's CPython version), whatever machine runs the synth. pydantic-core is
compiled, so a wheel for the build machine would fail at import time on Lambda.

boto3/botocore are not bundled: the Lambda Python runtime provides them.

The third-party packages are pinned to exactly what is installed here, pydantic and everything it
requires (:func:`pinned_requirements`), so the asset hash (which covers the pip command) changes
when any of their bytes could. Their wheels are fetched once into a cache (:func:`fetch_wheels`,
``$PUNCTUAL_WHEEL_CACHE``, default ``~/.cache/punctual/wheels``) before CDK bundles, so a synth
without the package index either uses the cache or stops with one clear :class:`AssetBuildError`
rather than a failure deep inside CDK's bundling callback.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

import punctual.core

#: The package every handler lives in (``punctual.functions.poller.handler.handler`` ...): found beside
#: this package, never through ``sys.path`` (a user's project may have a ``functions`` of its own).
#: In this repository that is ``infra/../functions``; in the installed wheel, where this package
#: is ``punctual.cdk``, it is ``punctual/cdk/../functions`` = ``punctual/functions``.
FUNCTIONS_DIR = Path(__file__).resolve().parent.parent / "functions"
CORE_DIR = Path(punctual.core.__file__).resolve().parent
#: What the asset holds: (source, path in the asset). The handlers import ``punctual.core``.
SOURCES: tuple[tuple[Path, str], ...] = (
    (FUNCTIONS_DIR, "punctual/functions"),  # the wheel's layout: handler strings are the same everywhere
    (CORE_DIR.parent / "__init__.py", "punctual/__init__.py"),
    (CORE_DIR, "punctual/core"),
)
#: Third-party distributions the functions import at run time (boto3 excluded: the runtime has it).
RUNTIME_DISTRIBUTIONS: tuple[str, ...] = ("pydantic",)
_IGNORE = ("__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".mypy_cache")


def _normalized(name: str) -> str:
    """PEP 503's name normalisation (``Typing_Extensions`` -> ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_closure(distributions: Iterable[str]) -> list[str]:
    """``distributions`` and, transitively, every distribution they require (requirements of extras
    left out), normalised and sorted."""
    seen: set[str] = set()
    todo = [_normalized(n) for n in distributions]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for req in requires:
            if "extra ==" not in req.replace('extra=="', 'extra == "'):
                match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
                if match:
                    todo.append(_normalized(match.group(0)))
    return sorted(seen)


def pinned_requirements(distributions: Sequence[str] = RUNTIME_DISTRIBUTIONS) -> list[str]:
    """``name==version`` for each distribution of :func:`requirement_closure` installed here (deploy
    exactly what the tests ran: pydantic, pydantic-core, typing-extensions, ...), else unpinned."""
    out = []
    for name in requirement_closure(distributions):
        try:
            out.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(name)
    return out


class AssetBuildError(RuntimeError):
    """The Lambda asset cannot be built here (its wheels cannot be fetched): a short message that
    says what and how to fix it."""


#: Where fetched wheels are kept (a folder per platform, Python version and pins).
WHEEL_CACHE_ENV = "PUNCTUAL_WHEEL_CACHE"


def wheel_cache_dir(platform: str, version: str, requirements: Sequence[str]) -> Path:
    base = os.environ.get(WHEEL_CACHE_ENV) or Path.home() / ".cache" / "punctual" / "wheels"
    key = hashlib.sha256("\0".join([platform, version, *requirements]).encode()).hexdigest()[:16]
    return Path(base) / f"{platform}-cp{version.replace('.', '')}-{key}"


def fetch_wheels(platform: str, version: str, requirements: Sequence[str], python: str = sys.executable) -> Path:
    """A folder with the wheels of ``requirements`` (and what they require) for the Lambda platform:
    from the cache if an earlier synth filled it, else downloaded by pip (its index settings apply:
    ``PIP_INDEX_URL``, ``PIP_FIND_LINKS``...). :class:`AssetBuildError` if pip cannot get them."""
    dest = wheel_cache_dir(platform, version, requirements)
    if (dest / ".complete").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".partial-") as tmp:
        cmd = [python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:",
               "--platform", platform, "--implementation", "cp", "--python-version", version, "--dest", tmp,
               *requirements]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            last = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "")
            raise AssetBuildError(
                f"cannot fetch the Lambda asset's wheels ({', '.join(requirements)}) for {platform}, "
                f"CPython {version}: pip says: {last[:300]} -- the synth downloads them once from the package "
                f"index (pip's PIP_INDEX_URL / PIP_FIND_LINKS apply) into {dest.parent}; synth once online, or "
                f"set {WHEEL_CACHE_ENV} to a folder filled on a machine that has them"
            )
        (Path(tmp) / ".complete").write_text("\n".join(requirements) + "\n")
        if dest.exists():  # another synth finished first
            shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
        Path(tmp).mkdir()  # for TemporaryDirectory's cleanup
    return dest


def pip_platform(architecture: lambda_.Architecture) -> str:
    """The manylinux platform tag of the wheels a Lambda of ``architecture`` can load."""
    return "manylinux2014_aarch64" if architecture.name == lambda_.Architecture.ARM_64.name else "manylinux2014_x86_64"


def python_version(runtime: lambda_.Runtime) -> str:
    """``"3.12"`` for ``python3.12``."""
    name = runtime.name
    if not name.startswith("python3."):
        raise ValueError(f"not a Python runtime: {name}")
    return name.removeprefix("python")


#: An interpreter to compile the asset's bytecode with (it must be of the runtime's version).
BYTECODE_PYTHON_ENV = "PUNCTUAL_BYTECODE_PYTHON"


def installed_pythons(version: str) -> list[str]:
    """Interpreters of Python ``version`` installed by the usual managers, even when not on PATH or
    not active: pyenv (``$PYENV_ROOT/versions``), uv (``~/.local/share/uv/python``), Homebrew and
    python.org/Linux prefixes. Newest patch first."""
    home = Path.home()
    patterns = [
        (Path(os.environ.get("PYENV_ROOT") or home / ".pyenv") / "versions", f"{version}*/bin/python{version}"),
        (Path(os.environ.get("UV_PYTHON_INSTALL_DIR") or home / ".local/share/uv/python"),
         f"cpython-{version}*/bin/python{version}"),
        (Path("/opt/homebrew/bin"), f"python{version}"),
        (Path("/usr/local/bin"), f"python{version}"),
        (Path("/usr/bin"), f"python{version}"),
    ]
    found = [str(path) for base, pattern in patterns if base.is_dir()
             for path in sorted(base.glob(pattern), reverse=True)]
    return list(dict.fromkeys(found))


def bytecode_python(version: str, candidates: Sequence[str] | None = None) -> str | None:
    """An interpreter of Python ``version`` ("3.13") on this machine, to compile the asset's bytecode
    with; None if there is none. A ``.pyc`` is only used by the interpreter version that wrote it,
    and Lambda's ``/var/task`` is read-only: without one, every cold start compiles every module
    (measured on CPython 3.13: the three handlers import in ~450-495 ms from source and ~205 ms
    from bytecode, docs/construct.md "Packaging without Docker"). Each candidate is run to check
    its version (a pyenv shim for an inactive version exists on PATH but fails). Looked for:
    ``$PUNCTUAL_BYTECODE_PYTHON``, the interpreter running the synth, ``python<version>`` on PATH,
    then :func:`installed_pythons` (pyenv, uv, ... even when not active)."""
    if candidates is None:
        chosen = os.environ.get(BYTECODE_PYTHON_ENV)
        candidates = [c for c in (chosen, sys.executable, f"python{version}") if c] + installed_pythons(version)
    for candidate in candidates:
        path = shutil.which(candidate)
        if path is None:
            continue
        try:
            proc = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0 and proc.stdout.strip() == version:
            return path
    return None


def compile_arguments(target: str) -> list[str]:
    """``python -m compileall`` for the asset: hash-based, unchecked ``.pyc`` (the zip does not keep
    source timestamps exactly, and the asset never changes after bundling)."""
    return ["-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash", target]


def pip_arguments(target: str, platform: str, version: str, requirements: Sequence[str]) -> list[str]:
    return [
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",  # bytecode is compiled afterwards, by the runtime's Python version or not at all
        "--platform", platform,
        "--only-binary=:all:",
        "--implementation", "cp",
        "--python-version", version,
        "--target", target,
        *requirements,
    ]


ASSET_DIR_MODE = 0o755


@jsii.implements(ILocalBundling)
class LocalPythonBundling:
    """Bundle ``source_dir`` (a Python package) and ``requirements`` without Docker."""

    def __init__(
        self,
        *,
        platform: str,
        python_version: str,
        requirements: Sequence[str],
        sources: Sequence[tuple[Path, str]] = SOURCES,
        python: str = sys.executable,
        compile_with: str | None = None,
        wheels: Path | None = None,
    ) -> None:
        self.platform = platform
        self.python_version = python_version
        self.requirements = list(requirements)
        self.sources = [(Path(src), dest) for src, dest in sources]
        self.python = python
        self.compile_with = compile_with  # an interpreter of the runtime's version, or None: no bytecode
        self.wheels = wheels  # fetch_wheels' folder, or None: fetched when bundling

    # jsii calls tryBundle(outputDir, options); the options struct is not needed here.
    def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
        out = Path(output_dir)
        # CDK creates the bundling folder world-writable (chmod 0o777, for a Docker container's user) and
        # renames it into the asset: rwxr-xr-x, what Lambda needs to read the code, writable by us only
        out.chmod(ASSET_DIR_MODE)
        for src, dest in self.sources:
            if src.is_dir():
                shutil.copytree(src, out / dest, ignore=shutil.ignore_patterns(*_IGNORE), dirs_exist_ok=True)
            else:
                (out / dest).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, out / dest)
        if self.requirements:
            wheels = self.wheels or fetch_wheels(self.platform, self.python_version, self.requirements, self.python)
            cmd = [self.python, "-m", "pip",
                   *pip_arguments(str(out), self.platform, self.python_version, self.requirements),
                   "--no-index", "--find-links", str(wheels)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"pip failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
        if self.compile_with:
            cmd = [self.compile_with, *compile_arguments(str(out))]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"compileall failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
        return True


def functions_code(
    architecture: lambda_.Architecture,
    runtime: lambda_.Runtime,
    requirements: Sequence[str] | None = None,
    bundle: bool = True,
) -> lambda_.AssetCode:
    """One asset (handlers + ``punctual.core`` + wheels) shared by the three functions of a stack.

    The asset hash covers the sources (caches excluded) and the bundling command below,
    which names the platform, Python version and the exact pins of every third-party package:
    a change to any of them gives a new asset. ``bundle``: whether this synth bundles the stack
    (``Stack.bundling_required``); if so the wheels are fetched now, so a synth that cannot get
    them stops here with :class:`AssetBuildError`.
    """
    reqs = pinned_requirements() if requirements is None else list(requirements)
    platform, version = pip_platform(architecture), python_version(runtime)
    wheels = fetch_wheels(platform, version, reqs) if bundle and reqs else None
    compile_with = bytecode_python(version) if bundle else None
    if bundle and compile_with is None:
        print(f"punctual: no Python {version} found (set {BYTECODE_PYTHON_ENV}): the Lambda asset ships without "
              f"bytecode, ~250 ms more per cold start (docs/construct.md, 'Packaging without Docker')",
              file=sys.stderr)
    local = LocalPythonBundling(platform=platform, python_version=version, requirements=reqs,
                                compile_with=compile_with, wheels=wheels)
    command = ["pip", *pip_arguments("/asset-output", platform, version, reqs)]
    if compile_with or not bundle:  # the hash tells an asset with bytecode from one without
        command += ["&&", f"python{version}", *compile_arguments("/asset-output")]
    return lambda_.Code.from_asset(
        str(FUNCTIONS_DIR),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=source_hash(SOURCES, command),
        exclude=[f"**/{p}" for p in _IGNORE],
        bundling=BundlingOptions(
            # Never pulled: local bundling always succeeds or raises. Docker is not required.
            image=DockerImage.from_registry("unused"),
            local=local,
            # Documents the equivalent command and feeds the asset hash.
            command=command,
        ),
    )


def source_files(sources: Sequence[tuple[Path, str]] = SOURCES) -> dict[str, Path]:
    """Every file the asset copies, by its path in the asset (caches excluded)."""
    out: dict[str, Path] = {}
    for src, dest in sources:
        files = [(p, f"{dest}/{p.relative_to(src).as_posix()}") for p in sorted(src.rglob("*")) if p.is_file()] \
            if src.is_dir() else [(src, dest)]
        for path, name in files:
            if not any(part == "__pycache__" or part.endswith((".pyc", ".pyo", "_cache")) for part in name.split("/")):
                out[name] = path
    return out


def source_hash(sources: Sequence[tuple[Path, str]], command: Sequence[str]) -> str:
    """SHA-256 of the asset's file names and contents and of the bundling command."""
    digest = hashlib.sha256("\0".join(command).encode())
    for name, path in sorted(source_files(sources).items()):
        digest.update(b"\0" + name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
