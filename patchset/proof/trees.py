"""Where each side's verl and Trinity-RFT come from (a source checkout put first on the path, or the installed
package), and the check that every rank imported them from there. The default trees, those ``scripts/apply.sh
--no-test`` makes, are read from the workspace when a run starts, never at import time."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing.errors import BadInput
from patchset.upstreams.pins import Pin
from patchset.upstreams.workspace import resolve_workspace

INSTALLED = "installed"
PACKAGES = ("verl", "trinity")
MARKERS = {"verl": Path("verl/version/version"), "trinity": Path("trinity/__init__.py")}


@dataclass(frozen=True)
class DefaultTrees:
    """The releases the proof is written for (the default verl and Trinity-RFT pins) and their trees in the cache."""

    pins: Mapping[str, Pin]
    trees: Mapping[tuple[str, str], Path]  # (package, side) -> the tree

    @classmethod
    def from_workspace(cls, environ: Mapping[str, str] = os.environ) -> DefaultTrees:
        workspace = resolve_workspace(None, None, environ)
        pins = {package: pin for package in PACKAGES if (pin := workspace.pins.default_for(package))}
        trees = {
            (package, side): (workspace.cache.upstreams if side == "vanilla" else workspace.cache.patched) / pin.dirname
            for package, pin in pins.items()
            for side in ("vanilla", "patched")
        }
        return cls(pins, trees)


@dataclass(frozen=True)
class Source:
    """Where one side's package comes from: a tree (put first on the path) or the installed package."""

    package: str
    tree: Path | None  # None: the installed package

    def describe(self) -> str:
        return f"{self.package} from {self.tree}" if self.tree else f"{self.package} as installed"


def source(package: str, side: str, value: str | None, explicit: bool, defaults: DefaultTrees) -> Source | None:
    """The source given for ``package`` on ``side``; None when the default tree is absent and it was not asked for."""
    if value == INSTALLED:
        return Source(package, None)
    tree = Path(value).expanduser().resolve() if value else defaults.trees[package, side]
    if not (tree / MARKERS[package]).is_file():
        if not explicit and package == "trinity":
            return None
        flag = f"--{'' if package == 'verl' else 'trinity-'}{side}"
        hint = f"no {MARKERS[package]} there" if value else "run scripts/apply.sh --no-test to make the pinned trees"
        raise BadInput(f"{flag} {tree}: not a {package} tree ({hint}); give a tree or '{INSTALLED}'")
    return Source(package, tree)


def check_modules(
    side: str, sources: Sequence[Source], modules: Mapping[str, str], defaults: DefaultTrees
) -> list[str]:
    """Problems with where a rank's modules came from: every module under the tree claimed; an installed package's
    modules all from one package folder, outside any of the default trees."""
    problems = []
    by_package = {source.package: source for source in sources}
    for name, file in modules.items():
        package = name.split(".", 1)[0]
        claimed = by_package.get(package)
        path = Path(file)
        if claimed is None:
            problems.append(f"{side}: {name} imported, but no {package} was given")
        elif claimed.tree is not None and not path.is_relative_to(claimed.tree):
            problems.append(f"{side}: {name} came from {path}, not from {claimed.tree}")
        elif claimed.tree is None:
            root = Path(modules[package]).parent.parent
            if not path.is_relative_to(root) or any(path.is_relative_to(tree) for tree in defaults.trees.values()):
                problems.append(f"{side}: {name} came from {path}, not from the installed {package} in {root}")
    return problems
