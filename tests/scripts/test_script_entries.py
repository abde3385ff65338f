"""The Python scripts are thin entries over `checkout_tools`, and they alone touch ``sys.path``.

Invariants: every ``scripts/*.py`` is a docstring, one line that appends the checkout to ``sys.path`` (what running a
file needs: Python puts only the script's own folder there), one import of a ``main`` from `checkout_tools`, and
``raise SystemExit(main())``; nothing else. No other Python file under ``scripts/`` or ``checkout_tools/`` changes
``sys.path`` (an ``append``, ``insert`` or any other change of the list, an assignment to it or to an item of it,
``site.addsitedir``). Each entry's module is there and has its ``main``.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchset.plumbing.paths import REPO_ROOT

ENTRIES = sorted((REPO_ROOT / "scripts").glob("*.py"))
# the statements of a thin entry, in order, as ast.dump would start them
THIN_ENTRY = (
    "Expr(value=Constant(",  # the docstring
    "Import(names=[alias(name='sys')",
    "ImportFrom(module='pathlib', names=[alias(name='Path')",
    "Expr(value=Call(func=Attribute(value=Attribute(value=Name(id='sys'",  # sys.path.append(<the checkout>)
    "ImportFrom(module='checkout_tools.",  # from checkout_tools.X import main
    "If(test=Compare(left=Name(id='__name__'",  # if __name__ == "__main__": raise SystemExit(main())
)
PATH_METHODS = {"append", "insert", "extend", "remove", "pop", "clear", "reverse", "sort", "__setitem__", "__iadd__"}


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def path_changes(source: str) -> Iterator[int]:
    """The line of each change of ``sys.path`` in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in PATH_METHODS and _is_sys_path(node.func.value):
                yield node.lineno
            elif node.func.attr == "addsitedir" and isinstance(node.func.value, ast.Name):
                yield node.lineno
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
            if any(_is_sys_path(t) or (isinstance(t, ast.Subscript) and _is_sys_path(t.value)) for t in targets):
                yield node.lineno


def _python_files() -> list[Path]:
    return sorted({*(REPO_ROOT / "scripts").rglob("*.py"), *(REPO_ROOT / "checkout_tools").rglob("*.py")})


def test_there_are_entries():
    assert {path.name for path in ENTRIES} >= {"bench.py", "gpu_proof.py", "lock.py", "plot.py"}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda path: path.name)
def test_each_python_script_is_a_thin_entry(entry):
    tree = ast.parse(entry.read_text(encoding="utf-8"))
    statements = [ast.dump(node) for node in tree.body]
    assert len(statements) == len(THIN_ENTRY), [line[:60] for line in statements]
    assert all(dumped.startswith(start) for dumped, start in zip(statements, THIN_ENTRY, strict=True)), statements
    assert len(list(path_changes(entry.read_text(encoding="utf-8")))) == 1
    (imported,) = (node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module != "pathlib")
    assert [alias.name for alias in imported.names] == ["main"]
    assert callable(importlib.import_module(imported.module).main)


def test_outside_the_thin_entries_nothing_changes_sys_path():
    changes = [
        f"{path.relative_to(REPO_ROOT)}:{line}"
        for path in _python_files()
        if path.parent != REPO_ROOT / "scripts"
        for line in path_changes(path.read_text(encoding="utf-8"))
    ]
    assert changes == []


@pytest.mark.parametrize(
    "source",
    [
        "import sys\nsys.path.insert(0, 'x')\n",
        "import sys\nsys.path.append('x')\n",
        "import sys\nsys.path[:0] = ['x']\n",
        "import sys\nsys.path = ['x']\n",
        "import sys\nsys.path += ['x']\n",
        "import site\nsite.addsitedir('x')\n",
        "import sys\ndef f():\n    sys.path.extend(['x'])\n",
    ],
)
def test_every_way_of_changing_the_path_is_seen(source):
    assert len(list(path_changes(source))) == 1


def test_reading_the_path_is_no_change():
    assert list(path_changes("import os, sys\nprint(sys.path[0], os.pathsep.join(sys.path))\n")) == []


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda path: path.name)
def test_each_python_script_answers_help_with_its_usage_and_exit_0(entry, capsys):
    tree = ast.parse(entry.read_text(encoding="utf-8"))
    (imported,) = (node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module != "pathlib")
    main = importlib.import_module(imported.module or "").main

    try:
        code = main(["--help"])
    except SystemExit as exit_:
        code = exit_.code

    assert code in (0, None)
    assert capsys.readouterr().out.startswith(f"usage: scripts/{entry.name}")
