"""What an overlay declares: the upstream it fits, the modules it may change, and its pieces (patches by slug).

Nothing here holds upstream code: a piece's changes are derived from its patches on the installed files
(`patchset_overlay.derive`). A piece is judged once, for all of its files, from the upstream's files on disk
(`patchset_overlay.guard`); once judged active, each module is changed the moment it has finished importing. What is
particular to one overlay (a part that is no import hook, what overlay mode cannot change) is data or a hook here, so
that the core never asks which overlay it has in hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from patchset_overlay.source import UpstreamSource
    from patchset_overlay.state import Verdict

# A check on the environment around the upstream: why the piece does not fit it (a reason), or None when it does.
FitCheck = Callable[["UpstreamSource"], "str | None"]


@dataclass(frozen=True)
class Piece:
    """Patches that go onto an installed release together, by slug (the file name without ``NNNN-`` and ``.patch``,
    the same in every release line's series): all of them or none. What they change is read from the patches
    themselves (`patchset_overlay.derive`)."""

    name: str
    patches: tuple[str, ...]
    # why the piece does not fit the environment around the upstream (e.g. another package's version), or None
    unfit: FitCheck | None = None


@dataclass(frozen=True)
class Overlay:
    """An overlay package for one upstream: the modules it may change, and its pieces. The releases it supports are
    the pins of ``patches/upstreams.toml`` marked ``overlay = true``; each has its files' sha256 recorded
    (`patchset_overlay.fingerprints`)."""

    name: str  # the overlay package, e.g. "verl_overlay"
    upstream: str  # the upstream's import name, e.g. "verl"
    distribution: str  # the upstream's PyPI name, e.g. "verl"
    modules: tuple[str, ...]  # the upstream modules it may change (the package's WATCHED)
    pieces: tuple[Piece, ...]
    # the folder (in the tree) of config files Hydra finds by search path; a patched one there is derived too
    config_dir: str = ""
    # the overlay package's JSON of {release: {"path in the tree": sha256}}: every file its series changes there
    fingerprints_file: str = "fingerprints.json"
    # what overlay mode leaves different from a patched tree (files on disk, which it never edits), for `status`
    cannot_change: str | None = None
    # the overlay's parts that are no import hook (verl's critic YAML on Hydra's search path), judged by the overlay
    # itself: {name: Verdict}, reported by `status` after the pieces
    other_parts: Callable[[Overlay], Mapping[str, Verdict]] | None = None
