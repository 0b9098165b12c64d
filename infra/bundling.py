"""Docker-free packaging of the Lambda code: ``functions/`` plus its third-party wheels.

:class:`LocalPythonBundling` implements CDK's ``ILocalBundling``: CDK calls
:meth:`try_bundle` with an empty output directory; we copy the ``functions``
package there and let pip install the runtime dependencies as *binary wheels for
the Lambda platform* (``manylinux2014_aarch64`` or ``manylinux2014_x86_64``, the
runtime's CPython version), whatever machine runs the synth. pydantic-core is
compiled, so a wheel for the build machine would fail at import time on Lambda.

boto3/botocore are not bundled: the Lambda Python runtime provides them.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

import functions

#: The package every handler lives in (``functions.poller.handler.handler`` ...).
FUNCTIONS_DIR = Path(functions.__file__).resolve().parent
#: Third-party distributions the functions import at run time (boto3 excluded: the runtime has it).
RUNTIME_DISTRIBUTIONS: tuple[str, ...] = ("pydantic",)
_IGNORE = ("__pycache__", "*.pyc", "*.pyo", ".pytest_cache", ".mypy_cache")


def pinned_requirements(distributions: Sequence[str] = RUNTIME_DISTRIBUTIONS) -> list[str]:
    """``name==version`` for each distribution installed here (deploy what the tests ran), else unpinned."""
    out = []
    for name in distributions:
        try:
            out.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(name)
    return out


def pip_platform(architecture: lambda_.Architecture) -> str:
    """The manylinux platform tag of the wheels a Lambda of ``architecture`` can load."""
    return "manylinux2014_aarch64" if architecture.name == lambda_.Architecture.ARM_64.name else "manylinux2014_x86_64"


def python_version(runtime: lambda_.Runtime) -> str:
    """``"3.12"`` for ``python3.12``."""
    name = runtime.name
    if not name.startswith("python3."):
        raise ValueError(f"not a Python runtime: {name}")
    return name.removeprefix("python")


def pip_arguments(target: str, platform: str, version: str, requirements: Sequence[str]) -> list[str]:
    return [
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",  # .pyc for the build interpreter would be dead weight on Lambda
        "--platform", platform,
        "--only-binary=:all:",
        "--implementation", "cp",
        "--python-version", version,
        "--target", target,
        *requirements,
    ]


@jsii.implements(ILocalBundling)
class LocalPythonBundling:
    """Bundle ``source_dir`` (a Python package) and ``requirements`` without Docker."""

    def __init__(
        self,
        *,
        platform: str,
        python_version: str,
        requirements: Sequence[str],
        source_dir: Path = FUNCTIONS_DIR,
        python: str = sys.executable,
    ) -> None:
        self.platform = platform
        self.python_version = python_version
        self.requirements = list(requirements)
        self.source_dir = Path(source_dir)
        self.python = python

    # jsii calls tryBundle(outputDir, options); the options struct is not needed here.
    def try_bundle(self, output_dir: str, *args: Any, **kwargs: Any) -> bool:
        out = Path(output_dir)
        shutil.copytree(self.source_dir, out / self.source_dir.name, ignore=shutil.ignore_patterns(*_IGNORE),
                        dirs_exist_ok=True)
        if self.requirements:
            cmd = [self.python, "-m", "pip",
                   *pip_arguments(str(out), self.platform, self.python_version, self.requirements)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"pip failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}")
        return True


def functions_code(
    architecture: lambda_.Architecture,
    runtime: lambda_.Runtime,
    requirements: Sequence[str] | None = None,
) -> lambda_.AssetCode:
    """One asset (``functions`` + wheels) shared by the three functions of a stack.

    The asset hash covers the source (``functions/``, caches excluded) and the
    bundling command below, which names the platform, Python version and pinned
    requirements: a change to any of them gives a new asset.
    """
    reqs = pinned_requirements() if requirements is None else list(requirements)
    platform, version = pip_platform(architecture), python_version(runtime)
    local = LocalPythonBundling(platform=platform, python_version=version, requirements=reqs)
    return lambda_.Code.from_asset(
        str(FUNCTIONS_DIR),
        asset_hash_type=AssetHashType.SOURCE,
        exclude=[f"**/{p}" for p in _IGNORE],
        bundling=BundlingOptions(
            # Never pulled: local bundling always succeeds or raises. Docker is not required.
            image=DockerImage.from_registry("unused"),
            local=local,
            # Documents the equivalent command and feeds the asset hash.
            command=["pip", *pip_arguments("/asset-output", platform, version, reqs)],
        ),
    )
