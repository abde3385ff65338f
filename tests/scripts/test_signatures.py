"""No function of the tooling takes more than `MOST_PARAMETERS` parameters: what belongs together travels as one
named object (a job, the `Workspace`, small dataclasses), as `apply.job.run_apply` takes its options."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MOST_PARAMETERS = 8


def parameter_count(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Positional, keyword-only and the catch-alls; ``self`` and ``cls`` not counted."""
    arguments = function.args
    names = [*arguments.posonlyargs, *arguments.args]
    count = len(names) + len(arguments.kwonlyargs) + (arguments.vararg is not None) + (arguments.kwarg is not None)
    return count - (bool(names) and names[0].arg in ("self", "cls"))


def long_signatures(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.name} takes {parameter_count(node)}"
        for path in sorted(root.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and parameter_count(node) > MOST_PARAMETERS
    ]


def test_no_tooling_function_takes_more_than_eight_parameters() -> None:
    assert long_signatures(REPO_ROOT / "patchset") == []


def test_a_long_signature_is_found(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(
        "class Job:\n    def run(self, a, b, c, d, e, f, g, h):\n        pass\n"
        "def make(a, b, c, d, e, f, g, *, h, i):\n    pass\n"
    )
    assert long_signatures(tmp_path) == ["job.py:4 make takes 9"]
