"""What a patch changes in a module, read from its text before and after, as the objects to change; any difference
of a form a fix is not made of raises `UnsupportedChange`, so that the piece is refused rather than half-made.
"""

from __future__ import annotations
import __future__

import ast
from dataclasses import dataclass

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


class UnsupportedChange(ValueError):
    """A difference the overlay cannot make in a live module."""


@dataclass(frozen=True)
class Change:
    """One object to change: ``kind`` is function, class-member, class-doc, assignment or statement; ``name`` the
    module-level name (for a statement, `statement_key`); ``member`` the class member, else ""; ``names``: what a
    statement binds."""

    kind: str
    name: str
    member: str = ""
    names: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if self.kind == "statement":
            return ", ".join(self.names)
        return f"{self.name}.{self.member}" if self.member else self.name


class Parsed:
    """A module's text and its syntax tree; statements are compared by their source text, which is the same for an
    unchanged statement wherever a patch moved it (and much cheaper than comparing trees)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tree = ast.parse(text)
        self._lines = text.split("\n")
        self.flags = 0  # its ``from __future__`` compiler flags
        self.binds: frozenset[str] = frozenset()  # every name its top level may bind (set by `keep_only`)

    def keep_only(self, keys: set[str]) -> None:
        """Keep only the module-level statements of ``keys`` (noting the future flags and the names bound first): a
        whole module's tree is ~100k objects that every garbage collection would walk."""
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                for alias in node.names:
                    self.flags |= getattr(__future__, alias.name).compiler_flag
        self.binds = frozenset(_module_binds(self.tree.body))
        self.tree.body = [node for node in self.tree.body if self.key(node) in keys]

    def segment(self, node: ast.AST) -> str:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])  # type: ignore[attr-defined]
        return "\n".join(self._lines[first - 1 : node.end_lineno])  # type: ignore[attr-defined]

    def key(self, node: ast.stmt) -> str:
        """How a module-level statement is matched between two texts: a definition or assignment by the name it
        binds, any other statement (an import, a call) by its text."""
        if isinstance(node, Definition | ast.Assign | ast.AnnAssign) and bound_names(node):
            return bound_names(node)[0]
        return self.segment(node)


def _module_binds(body: list[ast.stmt]) -> set[str]:
    """Every name a module's top level may bind, also under ``if``, ``try`` and ``with`` (optional imports)."""
    names = set()
    for node in body:
        names.update(bound_names(node))
        if not isinstance(node, Definition):
            for part in ("body", "orelse", "finalbody", "handlers"):
                names |= _module_binds(getattr(node, part, []))
    return names


def bound_names(node: ast.stmt) -> tuple[str, ...]:
    """The module-level names a statement binds (a definition's, an assignment's targets, an import's)."""
    if isinstance(node, Definition):
        return (node.name,)
    if isinstance(node, ast.Assign):
        return tuple(target.id for target in node.targets if isinstance(target, ast.Name))
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return (node.target.id,)
    if isinstance(node, ast.Import | ast.ImportFrom):
        return tuple((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return ()


def _members(node: ast.ClassDef) -> dict[str, ast.stmt]:
    members: dict[str, ast.stmt] = {}
    for index, item in enumerate(node.body):
        if index == 0 and isinstance(item, ast.Expr) and isinstance(item.value, ast.Constant):
            continue  # the docstring: compared on its own
        names = bound_names(item)
        if not names or isinstance(item, ast.Import | ast.ImportFrom):
            raise UnsupportedChange(f"class {node.name}: a statement that is no definition or assignment")
        members[names[0]] = item
    return members


def _class_changes(old: ast.ClassDef, new: ast.ClassDef, before: Parsed, after: Parsed) -> list[Change]:
    def same(left: list[ast.AST], right: list[ast.AST]) -> bool:
        return [before.segment(node) for node in left] == [after.segment(node) for node in right]

    if not same(old.bases + old.keywords, new.bases + new.keywords):
        raise UnsupportedChange(f"class {new.name}: its bases changed")
    if not same(old.decorator_list, new.decorator_list):
        raise UnsupportedChange(f"class {new.name}: its decorators changed")
    changes = []
    if ast.get_docstring(old, clean=False) != ast.get_docstring(new, clean=False):
        changes.append(Change("class-doc", new.name))
    old_members, new_members = _members(old), _members(new)
    if set(old_members) - set(new_members):
        removed = ", ".join(sorted(set(old_members) - set(new_members)))
        raise UnsupportedChange(f"class {new.name}: members removed: {removed}")
    for name, node in new_members.items():
        previous = old_members.get(name)
        if previous is None or before.segment(previous) != after.segment(node):
            if previous is not None and isinstance(node, Definition):
                if not same(getattr(previous, "decorator_list", []), node.decorator_list):
                    raise UnsupportedChange(f"{new.name}.{name}: its decorators changed")
            changes.append(Change("class-member", new.name, name))
    return changes


def module_changes(before: Parsed, after: Parsed) -> list[Change]:
    """Every change that turns module ``before`` into ``after`` (the module docstring and removed imports aside)."""
    old = {before.key(node): node for node in before.tree.body}
    changes: list[Change] = []
    for index, node in enumerate(after.tree.body):
        key = after.key(node)
        previous = old.get(key)
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if previous is None:
            if not bound_names(node):
                raise UnsupportedChange(f"a new module-level statement that binds no name: {key[:60]}")
            changes.append(Change("statement", key, names=bound_names(node)))
        elif before.segment(previous) == after.segment(node):
            continue
        elif isinstance(node, ast.ClassDef) and isinstance(previous, ast.ClassDef):
            changes.extend(_class_changes(previous, node, before, after))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and type(previous) is type(node):
            decorators = [before.segment(d) for d in previous.decorator_list]
            if decorators != [after.segment(d) for d in node.decorator_list]:
                raise UnsupportedChange(f"{key}: its decorators changed")
            changes.append(Change("function", key))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            changes.append(Change("assignment", key))
        else:
            raise UnsupportedChange(f"{key}: changed from {type(previous).__name__} to {type(node).__name__}")
    kept = {after.key(node) for node in after.tree.body}
    imports = ast.Import | ast.ImportFrom
    removed = [key for key, node in old.items() if key not in kept and not isinstance(node, imports)]
    if removed:
        raise UnsupportedChange(f"module-level definitions removed: {', '.join(removed)}")
    return changes
