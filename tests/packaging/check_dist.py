"""``make dist``'s last check (``python -m tests.packaging.check_dist dist``): one wheel and one sdist
of the same version; the wheel holds exactly the packages pyproject.toml lists (under the one import
package ``punctual``) and no tests; the sdist holds what building the wheel again needs. Twine has
already checked the metadata and the README's rendering."""

from __future__ import annotations

import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def problems(dist: Path) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    version, packages = project["project"]["version"], project["tool"]["setuptools"]["packages"]
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"expected one wheel and one sdist in {dist}, found {[p.name for p in wheels + sdists]}"]
    out = []
    base = f"punctual_aws-{version}"
    if wheels[0].name != f"{base}-py3-none-any.whl" or sdists[0].name != f"{base}.tar.gz":
        out.append(f"names {wheels[0].name}, {sdists[0].name} are not version {version}'s")
    names = zipfile.ZipFile(wheels[0]).namelist()
    dirs = {"/".join(n.split("/")[:-1]).replace("/", ".") for n in names if n.endswith(".py")}
    if dirs != set(packages):
        out.append(f"the wheel's packages {sorted(dirs ^ set(packages))} differ from pyproject.toml's")
    if any(n.startswith(("tests/", "bench/")) or "/tests/" in n for n in names):
        out.append("the wheel ships tests or bench results")
    with tarfile.open(sdists[0]) as tar:
        members = {m.name.removeprefix(base + "/") for m in tar.getmembers()}
    needed = {"pyproject.toml", "README.md", "functions/consumer/handler.py", "infra/construct.py",
              "infra/_props.py", "infra/_observability.py", "infra/bundling.py", "punctual/core/config.py"}
    out += [f"the sdist lacks {n}" for n in sorted(needed - members)]
    return out


def main(argv: list[str]) -> int:
    found = problems(Path(argv[0]) if argv else ROOT / "dist")
    for line in found:
        print(f"check_dist: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
