"""What an overlay declares: the upstream it fits, and its pieces, each the mirror of one or more patches.

A piece is judged once, for all of its targets, from the upstream's files on disk (`patchset_overlay.guard`);
once judged active, each target is changed the moment its own module has finished importing, by that module's
installer. So every installer must be safe on its own: it may not assume that another target is changed yet.
What is particular to one overlay (a part that is no import hook, what overlay mode cannot change) is data or a hook
here, so that the core never asks which overlay it has in hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from re import Pattern

    from patchset_overlay.source import UpstreamSource
    from patchset_overlay.state import Verdict

# An installer changes the piece's objects in one upstream module, appending one undo step per change as it makes
# it (so a failure half-way can be rolled back); the steps are run in reverse.
Installer = Callable[[ModuleType, list[Callable[[], None]]], None]
# A content check on the upstream's source: why it already has the fix (a reason), or None when it does not.
FixCheck = Callable[["UpstreamSource"], "str | None"]


def code_from(mirror: str, name: str) -> Installer:
    """The installer that gives the upstream module's function ``name`` the code of the function of that name in the
    overlay module ``mirror`` (imported when it runs), in place: every reference to the upstream function gets it
    (`patchset_overlay.replace.replace_function_code`)."""

    def install(module: ModuleType, undo: list[Callable[[], None]]) -> None:
        import importlib

        from patchset_overlay.replace import replace_function_code

        undo.append(replace_function_code(getattr(module, name), getattr(importlib.import_module(mirror), name)))

    return install


def source_has(module: str, name: str, mark: str | Pattern[str], reason: str) -> FixCheck:
    """The fix check that finds the patched code's ``mark`` (a string it holds, or an expression it matches) in the
    upstream's source of ``module.name``, and then says ``reason``."""

    def check(source: UpstreamSource) -> str | None:
        segment = source.segment(module, name)
        found = mark in segment if isinstance(mark, str) else mark.search(segment) is not None
        return reason if found else None

    return check


@dataclass(frozen=True)
class Target:
    """One upstream object a piece changes: a module-level function or class, by module and name."""

    module: str
    name: str

    @property
    def label(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class Piece:
    """The overlay mirror of the patches in ``patches`` (file stems), as they leave the upstream together."""

    name: str
    patches: tuple[str, ...]
    targets: tuple[Target, ...]
    installers: dict[str, Installer]  # upstream module -> what changes it, for every module of `targets`
    upstream_has_fix: FixCheck
    # why the piece does not fit the environment around the upstream (e.g. another package's version), or None
    unfit: FixCheck | None = None
    fixed_since: str | None = None  # the first upstream release with this piece's fix, if any
    # the supported releases this piece is written for, when its targets' code differs between releases (verl 0.7.1's
    # value_loss is not 0.8.0's: a piece each, with the same patches); None: every supported release
    releases: tuple[str, ...] | None = None

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(target.module for target in self.targets))


@dataclass(frozen=True)
class Overlay:
    """An overlay package for one upstream: the versions it supports and its pieces."""

    name: str  # the overlay package, e.g. "verl_overlay"
    upstream: str  # the upstream's import name, e.g. "verl"
    distribution: str  # the upstream's PyPI name, e.g. "verl"
    supported: tuple[str, ...]  # the releases it accepts; each piece is judged on its own there
    pieces: tuple[Piece, ...]
    # the overlay package's JSON of {release: {"module:name": sha256 of the source segment}} for each supported
    # release, of the targets of the pieces that release lacks (`patchset_overlay.fingerprints`)
    fingerprints_file: str = "fingerprints.json"
    # what overlay mode leaves different from a patched tree (files on disk, which it never edits), for `status`
    cannot_change: str | None = None
    # the overlay's parts that are no import hook (verl's critic YAML on Hydra's search path), judged by the overlay
    # itself: {name: Verdict}, reported by `status` after the pieces
    other_parts: Callable[[Overlay], Mapping[str, Verdict]] | None = None

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(module for piece in self.pieces for module in piece.modules))
