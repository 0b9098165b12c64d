"""A command whose extra is not installed names the extra and how to install it: one line, exit 1,
never a ModuleNotFoundError traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from punctual import extras
from punctual.cli.exits import EXIT_ERROR, describe_error

ROOT = Path(__file__).resolve().parents[2]
# Runs the CLI as if the extras' modules were not installed.
WITHOUT = """
import sys
for m in {blocked!r}:
    sys.modules[m] = None  # `import m` now raises ModuleNotFoundError
from punctual.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_without(blocked: tuple[str, ...], *argv: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT.format(blocked=blocked), *argv,
                           "--state-dir", str(tmp_path / "state")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("argv", [("local", "up"), ("demo",)])
def test_the_local_stack_commands_name_the_local_extra(tmp_path, argv):
    proc = run_without(("moto",), *argv, tmp_path=tmp_path)
    assert proc.returncode == EXIT_ERROR
    assert proc.stderr.strip() == (
        f"punctual: error: punctual {' '.join(argv)} needs moto (the [local] extra): "
        "pip install 'punctual-aws[local]' (from a checkout: pip install '.[local]')")
    assert not (tmp_path / "state" / "local.json").exists()  # nothing was started


def test_synthesizing_the_template_names_the_cdk_extra(tmp_path, monkeypatch):
    from punctual.local.template import TemplateError, load_template

    monkeypatch.setattr(extras, "installed", lambda module: module not in ("aws_cdk", "constructs"))
    with pytest.raises(TemplateError, match=r"needs aws_cdk, constructs \(the \[cdk\] extra\): "
                                            r"pip install 'punctual-aws\[cdk\]'"):
        load_template(None, tmp_path / "cache", log=lambda *_: None)


@pytest.mark.parametrize("module, extra", [("moto.server", "local"), ("aws_cdk", "cdk"), ("constructs", "cdk"),
                                           ("freezegun", "bench"), ("matplotlib.pyplot", "bench")])
def test_any_command_that_meets_a_missing_extras_module_names_the_extra(module, extra):
    line, code = describe_error(ModuleNotFoundError(f"No module named {module!r}", name=module))
    assert code == EXIT_ERROR
    assert line == f"this command needs {module.split('.')[0]} (the [{extra}] extra): " \
                   f"pip install 'punctual-aws[{extra}]' (from a checkout: pip install '.[{extra}]')"


def test_every_extra_named_exists_in_pyproject():
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras.EXTRA_OF.values()) <= set(declared)


@pytest.mark.parametrize("blocked, missing", [(("aws_cdk",), "aws_cdk"), (("aws_cdk", "constructs"), "aws_cdk, constructs"),
                                              (("constructs",), "constructs")])
def test_importing_the_construct_without_the_cdk_extra_names_the_extra(tmp_path, blocked, missing):
    """``import punctual.cdk`` without aws-cdk-lib: a ModuleNotFoundError (an ImportError, as before) whose
    message names the [cdk] extra and its install command, not a bare "No module named 'aws_cdk'"."""
    probe = (f"import sys\nfor m in {blocked!r}:\n    sys.modules[m] = None\n"
             "try:\n    import punctual.cdk\nexcept ModuleNotFoundError as exc:\n    print(exc.name, '|', exc)\n"
             "else:\n    print('imported')\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    name = blocked[0]
    assert proc.stdout.strip() == (
        f"{name} | punctual.cdk (the Scheduler construct) needs {missing} (the [cdk] extra): "
        "pip install 'punctual-aws[cdk]' (from a checkout: pip install '.[cdk]')")
