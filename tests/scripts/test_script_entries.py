"""No module or script changes its own import path.

Invariants: no Python file under ``scripts/``, ``patchset/`` or ``engine_harness/`` changes ``sys.path`` (an
``append``, ``insert`` or any other change of the list, an assignment to it or to an item of it,
``site.addsitedir``), but for the suite's fork server, whose forked children stand for fresh processes: it sets their
path as their ``PYTHONPATH`` would. ``scripts/gpu_proof.py`` runs ``python -m patchset proof`` from the repository
root instead.
A command that needs torch says so in one ``error:`` line (exit 2) where this Python cannot import it.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchset.cli import main
from patchset.plumbing.paths import REPO_ROOT

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


FORK_SERVER = REPO_ROOT / "patchset" / "testenv" / "suite_fork_server.py"


def _python_files() -> list[Path]:
    folders = ("scripts", "patchset", "engine_harness")
    return sorted(path for folder in folders for path in (REPO_ROOT / folder).rglob("*.py") if path != FORK_SERVER)


def test_nothing_changes_sys_path():
    changes = [
        f"{path.relative_to(REPO_ROOT)}:{line}"
        for path in _python_files()
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


@pytest.mark.parametrize(
    "line", [["proof", "--vanilla", "installed", "--patched", "installed"], ["bench"], ["bench", "--pre-pass"]]
)
def test_a_command_that_needs_torch_says_so_in_one_line(line, monkeypatch, capsys):
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else found(name, *a))

    assert main(line) == 2

    err = capsys.readouterr().err
    assert err.startswith("error: ") and "needs torch" in err and len(err.strip().splitlines()) == 1, err
