"""``make dist``'s last check (``python -m tests.packaging.check_dist dist``): one wheel and one sdist
of the same version; the wheel holds exactly the packages pyproject.toml lists (under the one import
package ``punctual``), the license and no tests; the sdist holds what building the wheel again needs;
and the wheel, installed alone into a fresh virtual environment, imports ``punctual``, its client,
CLI and construct (``punctual.cdk``) from there and runs ``punctual --help``. Twine has already
checked the metadata and the README's rendering.

The fresh environment gets the wheel with ``--no-deps --no-index`` (nothing is downloaded: this
works offline, in CI with only the package index, or none); its dependencies (boto3, pydantic and
the [cdk] extra's aws-cdk-lib, which ``punctual.cdk`` imports) are borrowed from the interpreter that
runs this check through a ``.pth`` line, which puts that site-packages on ``sys.path`` after the
fresh one and processes none of its ``.pth`` files, so an editable install of this repository there
is not seen. ``--system-site-packages`` would not do: from a virtual environment it gives the base
interpreter's site-packages, not this environment's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LICENSE = "LICENSE"
# Run inside the fresh environment: every module it imports must come from the wheel installed there.
IMPORT_PROBE = """
import sys, sysconfig
import punctual, punctual.client, punctual.cli, punctual.cdk
from punctual.cdk import Scheduler
site = sysconfig.get_paths()["purelib"]
for module in (punctual, punctual.client, punctual.cli, punctual.cdk):
    assert module.__file__.startswith(site), f"{module.__name__} from {module.__file__}, not {site}"
print("ok")
"""


def problems(dist: Path) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    version = project["project"]["version"]
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"expected one wheel and one sdist in {dist}, found {[p.name for p in wheels + sdists]}"]
    base = f"punctual_aws-{version}"
    out = []
    if wheels[0].name != f"{base}-py3-none-any.whl" or sdists[0].name != f"{base}.tar.gz":
        out.append(f"names {wheels[0].name}, {sdists[0].name} are not version {version}'s")
    out += wheel_problems(wheels[0], base, project["tool"]["setuptools"]["packages"])
    out += sdist_problems(sdists[0], base)
    return out or install_problems(wheels[0])


def wheel_problems(wheel: Path, base: str, packages: list[str]) -> list[str]:
    out = []
    names = zipfile.ZipFile(wheel).namelist()
    dirs = {"/".join(n.split("/")[:-1]).replace("/", ".") for n in names if n.endswith(".py")}
    if dirs != set(packages):
        out.append(f"the wheel's packages {sorted(dirs ^ set(packages))} differ from pyproject.toml's")
    if any(n.startswith(("tests/", "bench/")) or "/tests/" in n for n in names):
        out.append("the wheel ships tests or bench results")
    if f"{base}.dist-info/licenses/{LICENSE}" not in names:
        out.append(f"the wheel lacks {base}.dist-info/licenses/{LICENSE}")
    metadata = zipfile.ZipFile(wheel).read(f"{base}.dist-info/METADATA").decode().split("\n\n")[0].splitlines()
    for field in ("License-Expression: Apache-2.0", f"License-File: {LICENSE}"):
        if field not in metadata:
            out.append(f"the wheel's METADATA lacks {field!r}")
    return out


def sdist_problems(sdist: Path, base: str) -> list[str]:
    with tarfile.open(sdist) as tar:
        members = {m.name.removeprefix(base + "/") for m in tar.getmembers()}
    needed = {"pyproject.toml", "README.md", LICENSE, "functions/consumer/handler.py", "infra/construct.py",
              "infra/_props.py", "infra/_observability.py", "infra/bundling.py", "punctual/core/config.py"}
    return [f"the sdist lacks {n}" for n in sorted(needed - members)]


def clean_environment() -> dict[str, str]:
    """This process's environment without what would point a fresh interpreter back at this one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION"] = "1"
    env["JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION"] = "1"
    return env


def install_alone(wheel: Path, env_dir: Path) -> subprocess.CompletedProcess[str]:
    """A fresh virtual environment at ``env_dir`` with ``wheel`` installed alone (``--no-deps
    --no-index``) and this interpreter's site-packages borrowed for its dependencies; pip's process."""
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          env=clean_environment(), capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "borrowed-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                           "--no-index", str(wheel.resolve())],
                          env=clean_environment(), capture_output=True, text=True, timeout=600, check=False)


def install_problems(wheel: Path) -> list[str]:
    """Install ``wheel`` alone into a fresh virtual environment and import it from there."""
    with tempfile.TemporaryDirectory(prefix="check-dist-") as tmp:
        env_dir = Path(tmp) / "venv"
        bindir = env_dir / "bin"
        steps = [
            ("pip install --no-deps --no-index", lambda: install_alone(wheel, env_dir)),
            ("import punctual, punctual.client, punctual.cli, punctual.cdk",
             lambda: _run_in(tmp, bindir / "python", "-c", IMPORT_PROBE)),
            ("punctual --help", lambda: _run_in(tmp, bindir / "punctual", "--help")),
        ]
        for what, step in steps:
            proc = step()
            if proc.returncode != 0:
                tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["(no output)"]
                return [f"the wheel in a fresh venv: {what} failed ({proc.returncode}): {tail[0]}"]
    return []


def _run_in(cwd: str, *cmd: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=clean_environment(), capture_output=True, text=True,
                          timeout=600, check=False)


def main(argv: list[str]) -> int:
    found = problems(Path(argv[0]) if argv else ROOT / "dist")
    for line in found:
        print(f"check_dist: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
