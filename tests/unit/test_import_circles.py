"""No import circle among the modules of punctual/ (issue 43): each module can be read and imported
without the modules that import it.

What counts as an import (read from the source with ``ast``, nothing is imported):
- statements run when the module is imported: at the top level, and inside ``if``/``else``,
  ``try``/``except``/``finally``, ``with`` and class bodies, in every form (``import a.b``,
  ``from a import b``, ``from . import b``, ``from ..a import b``);
- ``from p import n`` depends on the module ``p.n`` when it is one (a submodule), else on ``p``;
  ``import a.b.c`` on the deepest of ``a.b.c``, ``a.b``, ``a`` that is a module of punctual/.

What does not:
- imports inside functions (run on call, after every module involved is loaded: the lazy loads
  of ``punctual/__init__.py``, boto3 in the client and the CLI);
- the implicit import of a module's parent packages (Python initialises a package before its
  submodules, so ``punctual/cli/__init__.py`` importing ``punctual.cli.tasks`` is no circle);
- imports under ``if TYPE_CHECKING:`` do not count at run time (never run), but the graph is
  checked a second time with them: the two circles issue 43 removed were of that kind (config.py
  imported observability.py, which imported config's ``Settings`` for its types; consume.py
  imported deliver.py, which imported consume's ``ConsumeReport`` for its types), and a reader
  still cannot read such a module alone. A type both sides need lives where both can import it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_names(package_dir: Path) -> dict[str, Path]:
    """Every module under ``package_dir`` by dotted name (a package by its ``__init__.py``)."""
    base = package_dir.parent
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_statements(body: list[ast.stmt], type_checking: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when a module with this ``body`` is imported (with
    ``type_checking``, those a type checker reads too)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            skip = _is_type_checking(node.test) and not type_checking
            found += _import_statements(node.orelse if skip else node.body + node.orelse, type_checking)
        elif isinstance(node, ast.Try):
            found += _import_statements(node.body + [s for h in node.handlers for s in h.body]
                                        + node.orelse + node.finalbody, type_checking)
        elif isinstance(node, ast.With | ast.ClassDef):
            found += _import_statements(node.body, type_checking)
    return found


def dependencies(name: str, path: Path, modules: dict[str, Path], type_checking: bool) -> set[str]:
    """The modules of ``modules`` that ``name`` (at ``path``) imports when it is imported."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def deepest(dotted: str) -> str | None:
        parts = dotted.split(".")
        return next((m for m in (".".join(parts[:n]) for n in range(len(parts), 0, -1)) if m in modules), None)

    found: set[str] = set()
    for node in _import_statements(ast.parse(path.read_text(), str(path)).body, type_checking):
        if isinstance(node, ast.Import):
            targets = [deepest(alias.name) for alias in node.names]
        else:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else deepest(source)
                       for a in node.names]
        found |= {t for t in targets if t is not None and t != name}
    return found


def import_graph(package_dir: Path, type_checking: bool = False) -> dict[str, set[str]]:
    modules = module_names(package_dir)
    return {name: dependencies(name, path, modules, type_checking) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


@pytest.mark.parametrize("type_checking", [False, True], ids=["at run time", "with TYPE_CHECKING imports"])
def test_no_import_circle_in_punctual(type_checking):
    graph = import_graph(ROOT / "punctual", type_checking)
    # the reading found the code: every layer, and the edges a reader sees at the top of the files
    assert len(graph) >= 60
    assert "punctual.core.store" in graph["punctual.core.usecases.consume"] | graph["punctual.core.usecases.deliver"]
    assert "punctual.cli.tasks" in graph["punctual.cli"]  # ``from . import ... tasks``
    assert circles(graph) == []


TC = "from typing import TYPE_CHECKING\n"


@pytest.mark.parametrize(("a_source", "b_source", "at_run_time", "with_type_checking"), [
    ("from . import b\n", "from .a import X\n", True, True),
    ("import pkg.b\n", "from pkg import a\n", True, True),
    ("try:\n    from .b import Y\nexcept ImportError:\n    pass\n", "from ..pkg.a import X\n", True, True),
    ("class K:\n    from .b import Y\n", "from . import a\n", True, True),
    # b's import of a is under TYPE_CHECKING: a circle for the type checker only ...
    ("from .b import Y\n", TC + "if TYPE_CHECKING:\n    from .a import X\n", False, True),
    ("from .b import Y\n", "import typing\nif typing.TYPE_CHECKING:\n    from .a import X\n", False, True),
    # ... but the else branch of a TYPE_CHECKING test runs
    ("from .b import Y\n", TC + "if TYPE_CHECKING:\n    pass\nelse:\n    from .a import X\n", True, True),
    # inside a function: no circle at all
    ("from .b import Y\n", "def f():\n    from .a import X\n", False, False),
    ("from .b import Y\n", "from . import c\n", False, False),
])
def test_what_counts_as_a_circle(tmp_path, a_source, b_source, at_run_time, with_type_checking):
    # GIVEN a package of three modules (and an __init__ that imports them: no circle by itself)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import a, b, c\n")
    (pkg / "a.py").write_text(a_source)
    (pkg / "b.py").write_text(b_source)
    (pkg / "c.py").write_text("")
    # WHEN its graph is read, THEN a and b make a circle exactly when both imports count
    assert circles(import_graph(pkg)) == ([["pkg.a", "pkg.b"]] if at_run_time else [])
    assert circles(import_graph(pkg, type_checking=True)) == ([["pkg.a", "pkg.b"]] if with_type_checking else [])
