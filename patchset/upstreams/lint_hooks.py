"""A hook of an upstream's lint gates as export-pr runs it: a ``repo: local`` one, as pre-commit cannot clone hook
repositories here (no network but PyPI); and pre-commit-hooks' basic checks, written again (it is not in the lock)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# what runs a hook's own ``check``: ``python -m patchset lint-hook UPSTREAM ID FILES...`` (patchset/cli/lint_hook.py)
RUNNER = ("patchset", "lint-hook")

# a check of this project's own: the files pre-commit passes -> one problem a line, none when they pass
Check = Callable[[Sequence[str]], list[str]]


@dataclass(frozen=True)
class LintHook:
    """One hook, as a ``repo: local`` pre-commit hook: ``command``, a tool of the test venv (or a ``pygrep``
    expression), else ``check``, run by ``RUNNER``; ``options``: pre-commit's other fields, in order."""

    id: str
    name: str
    command: tuple[str, ...] = ()
    language: str = "system"
    options: tuple[tuple[str, object], ...] = ()
    check: Check | None = None


def hook(hook_id: str, name: str, *command: str, language: str = "system", **options: object) -> LintHook:
    """A hook running ``command`` (a pygrep hook's expression), with pre-commit's ``options``."""
    return LintHook(hook_id, name, tuple(command), language, tuple(options.items()))


def own_hook(hook_id: str, name: str, check: Check, **options: object) -> LintHook:
    """A hook of this project's own: ``check`` on the files pre-commit passes (``options``: which)."""
    return LintHook(hook_id, name, options=tuple(options.items()), check=check)


def python_tool(hook_id: str, name: str, *command: str, args: Sequence[str] = (), **options: object) -> LintHook:
    """A formatter or linter of Python files, run once on all of them as upstream's config does."""
    kinds = options or {"types_or": ["python", "pyi"]}
    return hook(hook_id, name, *command, **({"args": list(args)} if args else {}), **kinds, require_serial=True)


def _unreadable(files: Sequence[str], parse: Callable[[str, bytes], object], error: type[Exception]) -> list[str]:
    """``name: <the error>`` for each of ``files`` that ``parse`` (its name, its bytes) rejects with ``error``."""
    problems = []
    for name in files:
        try:
            parse(name, Path(name).read_bytes())
        except error as exc:
            problems.append(f"{name}:{exc.lineno}: {exc.msg}" if isinstance(exc, SyntaxError) else f"{name}: {exc}")
    return problems


def check_ast(files: Sequence[str]) -> list[str]:
    """pre-commit-hooks' check-ast: every file parses as Python."""
    return _unreadable(files, lambda name, data: ast.parse(data, filename=name), SyntaxError)


def check_yaml(files: Sequence[str]) -> list[str]:
    """pre-commit-hooks' check-yaml: every document of every file parses as YAML."""
    import yaml

    return _unreadable(files, lambda _name, data: list(yaml.safe_load_all(data)), yaml.YAMLError)


def end_of_file(files: Sequence[str]) -> list[str]:
    """pre-commit-hooks' end-of-file-fixer, as a check: every non-empty file ends with exactly one newline."""
    problems = []
    for name in files:
        data = Path(name).read_bytes()
        if data and (not data.endswith(b"\n") or data.endswith(b"\n\n")):
            problems.append(f"{name}: must end with exactly one newline")
    return problems
