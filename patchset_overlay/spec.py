"""What an overlay declares: the upstream it fits, and one piece per patch it mirrors.

Each piece names the upstream objects it replaces with a fingerprint of their source, so that code the overlay
was not written for is never replaced (see `patchset_overlay.guard`).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

# An installer replaces a piece's upstream objects, appending one undo step per change as it makes it (so a
# failure half-way can be rolled back); the steps are run in reverse.
Installer = Callable[[Mapping[str, ModuleType], list[Callable[[], None]]], None]
# A content check: why the upstream modules already have the fix (a reason), or None when they do not.
FixCheck = Callable[[Mapping[str, ModuleType]], "str | None"]


def source_fingerprint(obj: Any) -> str:
    """sha256 of an object's source text: any edit of the upstream function or class changes it."""
    return hashlib.sha256(inspect.getsource(obj).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Target:
    """One upstream object a piece replaces or changes, and the fingerprint of the code it was written for."""

    module: str
    name: str
    fingerprint: str

    @property
    def label(self) -> str:
        return f"{self.module}.{self.name}"

    def resolve(self, modules: Mapping[str, ModuleType]) -> Any:
        return getattr(modules[self.module], self.name)


@dataclass(frozen=True)
class Piece:
    """The overlay mirror of one patch of the series (``patch`` is the patch file's stem)."""

    patch: str
    summary: str
    targets: tuple[Target, ...]
    install: Installer
    upstream_has_fix: FixCheck
    # pieces of the same overlay this one builds on (it changes what they installed): it is installed only on
    # top of them, and refused when any of them is off
    requires: tuple[str, ...] = ()
    # target modules upstream imports lazily (e.g. through a registry): once the others are imported, the piece
    # imports these itself, so that it is judged and installed whole rather than waiting for them forever
    loads: tuple[str, ...] = ()

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(target.module for target in self.targets))


@dataclass(frozen=True)
class Overlay:
    """An overlay package for one upstream: the versions it supports and its pieces."""

    name: str  # the overlay package, e.g. "verl_overlay"
    upstream: str  # the upstream's import name, e.g. "verl"
    distribution: str  # the upstream's PyPI name, e.g. "verl"
    supported: tuple[str, ...]
    fixed_since: str | None  # first upstream release with every fix of this overlay, if any
    pieces: tuple[Piece, ...]
