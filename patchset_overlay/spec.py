"""What an overlay declares (the upstream it fits, the modules it may change, its pieces), the upstream it finds on
disk, and the verdict on each piece. What is particular to one overlay is data or a hook here, so that the core
never asks which overlay it has in hand.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

_VERSION_ASSIGNMENT = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


class PieceState(Enum):
    PENDING = "pending"  # activated, not judged yet (none of the upstream's target modules imported so far)
    ACTIVE = "active"
    UPSTREAM_HAS_FIX = "off (upstream has the fix)"
    OTHER_RELEASE = "off (another release's piece)"  # a piece written for other releases (another may cover this one)
    REFUSED = "off (refused)"
    INACTIVE = "off"


@dataclass(frozen=True)
class Verdict:
    """A piece's state and why: what the guard decides, and what `status` reports of a config file."""

    state: PieceState
    reason: str


@dataclass
class UpstreamSource:
    """The files of one installed upstream package, found without importing it: a piece is often judged half-way
    through one of the upstream's imports, where importing a sibling module could hand back a half-initialised one."""

    package: str
    root: Path

    @classmethod
    def find(cls, package: str) -> UpstreamSource | None:
        """The imported package's folder if it is imported, else where import would find it; None: not installed."""
        module = sys.modules.get(package)
        if module is not None and getattr(module, "__file__", None):
            return cls(package, Path(module.__file__).resolve().parent)
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return None
        return cls(package, Path(next(iter(spec.submodule_search_locations))).resolve())

    def version(self) -> str:
        """The release of the files on disk: ``<package>/version/version`` (verl) or ``__version__`` in
        ``__init__.py`` (Trinity); "unknown" when neither says."""
        version_file = self.root / "version" / "version"
        if version_file.is_file():
            return version_file.read_text(encoding="utf-8").strip()
        init = self.root / "__init__.py"
        match = _VERSION_ASSIGNMENT.search(init.read_text(encoding="utf-8")) if init.is_file() else None
        return match.group(1) if match else "unknown"


@dataclass(frozen=True)
class Piece:
    """Patches that go onto an installed release together, by slug (the file name without ``NNNN-`` and ``.patch``,
    the same in every release line's series): all of them or none."""

    name: str
    patches: tuple[str, ...]
    # why the piece does not fit the environment around the upstream (e.g. another package's version), or None
    unfit: Callable[[UpstreamSource], str | None] | None = None


@dataclass(frozen=True)
class Overlay:
    """An overlay package for one upstream: the modules it may change, and its pieces. The releases it supports are
    the pins of ``patches/upstreams.toml`` marked ``overlay = true``."""

    name: str  # the overlay package, e.g. "verl_overlay"
    upstream: str  # the upstream's import name, e.g. "verl"
    distribution: str  # the upstream's PyPI name, e.g. "verl"
    modules: tuple[str, ...]  # the upstream modules it may change (the package's WATCHED)
    pieces: tuple[Piece, ...]
    # the folder (in the tree) of config files Hydra finds by search path; a patched one there is derived too, and
    # `status` reports each after the pieces
    config_dir: str = ""
    # what overlay mode leaves different from a patched tree (files on disk, which it never edits), for `status`
    cannot_change: str | None = None
