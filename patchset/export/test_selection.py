"""Which of an upstream's own test files test what a PR branch changes (named for it, or importing it, re-exports
followed through package ``__init__``s), and which of them can run here. Only the test file is read, never the
patched code, so a patch cannot make its own test be skipped."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from patchset.upstreams.registry import UPSTREAMS, Upstream


@dataclass(frozen=True)
class Selected:
    """One upstream test file chosen for a branch, and why (what it is named for or imports)."""

    path: str
    why: str
    not_run: str = ""  # why it cannot run here; "" for a file that runs


def module_name(path: str, package: str) -> str | None:
    """``trinity/algorithm/__init__.py`` -> ``trinity.algorithm``; None for a file that is no module of ``package``."""
    if not path.startswith(f"{package}/") or not path.endswith(".py"):
        return None
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _absolute(module: str | None, level: int, package: str) -> str:
    """The absolute name of a ``from`` import's module, relative ones resolved against ``package``."""
    if not level:
        return module or ""
    base = package.split(".")[: len(package.split(".")) - (level - 1)]
    return ".".join([*base, module] if module else base)


@dataclass
class _Reach:
    """What reaches the changed modules, each mapped to the changed file it leads to."""

    modules: dict[str, str]
    names: dict[str, str]
    packages: dict[str, str]
    starred: dict[str, str] = field(default_factory=dict)  # packages that star-import a changed module: any name

    def origin(self, name: str) -> str | None:
        """The changed file that importing ``name`` (a module, or a name of one) reaches; None when none."""
        for module, origin in self.modules.items():
            if name == module or name.startswith(f"{module}."):
                return origin
        package = name.rpartition(".")[0]  # a star-import binds any name of its package
        return self.names.get(name) or self.starred.get(package) or self.starred.get(name) or self.packages.get(name)


def _public_names(module: ast.Module) -> list[str] | None:
    """The names ``from module import *`` binds; None when ``__all__`` is computed."""
    names: list[str] = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = [
            t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)
        ]
        if "__all__" in targets:
            value = node.value
            if isinstance(value, ast.List | ast.Tuple) and all(isinstance(e, ast.Constant) for e in value.elts):
                return [str(e.value) for e in value.elts if isinstance(e, ast.Constant)]
            return None
        names += targets
    return [name for name in names if not name.startswith("_")]


def _init_bindings(tree: ast.Module, package: str, reach: _Reach, root: Path) -> dict[str, str]:
    """{name: changed file} for the names a package ``__init__`` binds that reach a changed module (``*``: names it
    cannot list)."""
    bound: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node.module, node.level, package)
            for alias in node.names:
                if alias.name == "*":  # the public names of a reaching module
                    if origin := reach.origin(source):
                        module = _parse(root / f"{source.replace('.', '/')}.py")
                        names = _public_names(module) if module else None
                        bound.update(dict.fromkeys(names, origin) if names is not None else {"*": origin})
                elif origin := reach.origin(f"{source}.{alias.name}"):
                    bound[alias.asname or alias.name] = origin
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [target.id for target in targets if isinstance(target, ast.Name)]
            for text in (c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)):
                if isinstance(text, str) and (origin := reach.origin(text)):
                    bound.update(dict.fromkeys(names, origin))
                    break
    return bound


def reach_of(tree: Path, package: str, changed: Sequence[str]) -> _Reach:
    """What reaches the package modules ``changed`` (paths relative to ``tree``) through their parent packages."""
    modules = {name: path for path in changed if (name := module_name(path, package))}
    reach = _Reach(modules=modules, names={}, packages={})
    parents = {".".join(name.split(".")[:depth]) for name in modules for depth in range(1, name.count(".") + 1)}
    inits = {parent: init for parent in parents if (init := _parse(tree / parent.replace(".", "/") / "__init__.py"))}
    grew = True
    while grew:  # until no package binds a new name: a package may re-export what another re-exports
        grew = False
        for parent in sorted(inits, key=lambda name: -name.count(".")):
            for name, origin in _init_bindings(inits[parent], parent, reach, tree).items():
                if name == "*" and parent not in reach.starred:
                    reach.starred[parent] = origin
                    grew = True
                elif name != "*" and f"{parent}.{name}" not in reach.names:
                    reach.names[f"{parent}.{name}"] = origin
                    reach.packages.setdefault(parent, origin)
                    grew = True
    return reach


def _imports(tree: ast.Module | None) -> Iterable[str]:
    """The dotted name of everything a file imports absolutely (``from m import n``: ``m.n``); none if unparsed."""
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield from (node.module if a.name == "*" else f"{node.module}.{a.name}" for a in node.names)


def imports_reaching(test: Path, reach: _Reach) -> tuple[str, str] | None:
    """(the import, the changed file it reaches) for the first import of ``test`` that reaches one, else None."""
    for name in _imports(_parse(test)):
        if origin := reach.origin(name):
            return name, origin
    return None


def missing_modules(python: Path, names: Iterable[str], env: dict[str, str]) -> set[str]:
    """The top-level modules of ``names`` that ``python`` (the test venv, with ``env``'s path) cannot find."""
    wanted = sorted(set(names))
    if not wanted:
        return set()
    code = "import importlib.util as u,json,sys;print(json.dumps([n for n in sys.argv[1:] if not u.find_spec(n)]))"
    proc = subprocess.run(
        [str(python), "-c", code, *wanted], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True
    )
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        raise RuntimeError(f"{python} could not look up the modules the upstream tests import")
    return set(json.loads(proc.stdout))


def resource_reason(upstream: Upstream, path: str, source: str) -> str | None:
    """Why upstream's test ``path`` needs what this machine lacks (a GPU, a Ray cluster, a model), or None."""
    name = path.rsplit("/", 1)[-1]
    if upstream.gpu_unless_suffix and not name.endswith(upstream.test_suffix):
        return f"a GPU test by {upstream.title}'s naming ({upstream.gpu_naming_source})"
    for pattern, reason in upstream.resource_markers:
        if re.search(pattern, source, re.MULTILINE):
            return reason
    return None


def select(
    key: str, tree: Path, changed: Sequence[str], base_files: Sequence[str], python: Path, env: dict[str, str]
) -> tuple[list[Selected], list[Selected], tuple[str, ...]]:
    """The release's test files that test or are ``changed``, split by whether they can run here (those that cannot
    say why); and the test files the branch adds."""
    upstream = UPSTREAMS[key]
    existing = [f for f in base_files if upstream.is_test(f)]
    chosen: dict[str, str] = {}
    for path in changed:
        if (pattern := upstream.cpu_test_pattern(path)) is not None:
            for test in existing:
                if pattern.match(test):
                    chosen.setdefault(test, f"named for {path}")
    reach = reach_of(tree, upstream.package, changed)
    for test in existing:
        if test not in chosen and (found := imports_reaching(tree / test, reach)):
            name, origin = found
            module = module_name(origin, upstream.package) or ""
            reached = "" if name == module or name.startswith(f"{module}.") else f", which reaches {origin}"
            chosen[test] = f"imports {name}{reached}"
    for test in existing:  # one the branch changes (an upstream-tests patch, or a series patch on verl's tests)
        if test in changed:
            chosen.setdefault(test, "changed by this branch")
    own = tuple(f for f in changed if upstream.is_test(f) and f not in chosen)
    run: list[Selected] = []
    not_run: list[Selected] = []
    roots = {test: {name.split(".")[0] for name in _imports(_parse(tree / test))} for test in chosen}
    missing = missing_modules(python, (root for names in roots.values() for root in names), env)
    for test, why in chosen.items():
        source = (tree / test).read_text(encoding="utf-8", errors="replace")
        reason = resource_reason(upstream, test, source)
        if reason is None and (lacking := sorted(roots[test] & missing)):
            reason = f"imports {', '.join(lacking)}, which the test venv does not have"
        (not_run if reason else run).append(Selected(test, why, reason or ""))
    return run, not_run, own


_COLLECT_ERROR = re.compile(r"^_+ ERROR collecting (?P<path>\S+) _+$", re.MULTILINE)
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '(?P<name>[\w.]+)'")


def import_gaps(output: str, files: Sequence[str]) -> dict[str, str]:
    """{test file: the module it could not import} for each of ``files`` pytest's ``output`` failed to collect."""
    gaps: dict[str, str] = {}
    parts = _COLLECT_ERROR.split(output)[1:]  # each header's path, then its report up to the next header
    for path, report in zip(parts[::2], parts[1::2], strict=True):
        found = _NO_MODULE.search(report)
        test = next((f for f in files if path == f or path.endswith(f"/{f}")), None)
        if found and test:
            gaps[test] = found["name"]
    return gaps
