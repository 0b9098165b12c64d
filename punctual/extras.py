"""Which extra installs what a command imports beyond the wheel's own dependencies (boto3,
pydantic), so that a missing one is named, with the command to install it, instead of a
``ModuleNotFoundError``."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

#: the top-level modules the extras bring -> the extra (pyproject.toml [project.optional-dependencies])
EXTRA_OF: dict[str, str] = {
    "moto": "local",
    "aws_cdk": "cdk",
    "constructs": "cdk",
    "freezegun": "bench",
    "matplotlib": "bench",
}
DISTRIBUTION = "punctual-aws"


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that fails, or a module blocked in sys.modules
        return False


def install_hint(extras: Iterable[str]) -> str:
    names = ",".join(sorted(set(extras)))
    return f"pip install '{DISTRIBUTION}[{names}]' (from a checkout: pip install '.[{names}]')"


def missing_message(what: str, modules: Iterable[str]) -> str | None:
    """``"<what> needs moto (the [local] extra): pip install ..."`` for the ``modules`` not
    installed, or None when all are."""
    missing = [m for m in modules if not installed(m)]
    if not missing:
        return None
    extras = sorted({EXTRA_OF.get(m, m) for m in missing})
    return (f"{what} needs {', '.join(missing)} (the {', '.join(f'[{e}]' for e in extras)} "
            f"extra{'s' if len(extras) > 1 else ''}): {install_hint(extras)}")


def describe_missing_module(exc: BaseException) -> str | None:
    """The line for a ``ModuleNotFoundError`` of a module an extra brings, else None."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    if top not in EXTRA_OF:
        return None
    return f"this command needs {top} (the [{EXTRA_OF[top]}] extra): {install_hint([EXTRA_OF[top]])}"
