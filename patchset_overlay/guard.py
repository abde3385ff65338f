"""Never patch blind: decide, once and for the whole piece, whether it fits the upstream on disk, from its files alone.

The order matters: upstream has the fix, the series has none of the piece's patches, the tree carries them already,
then refusals (an unsupported version, an unfit environment, a file that is not the pinned sdist's).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from pathlib import Path

from patchset_overlay.derive import Plan, release_series, sha256
from patchset_overlay.hunks import HunkError, apply_hunks
from patchset_overlay.spec import Overlay, Piece, PieceState, Verdict


def fingerprints_path(overlay: Overlay) -> Path:
    """The overlay package's JSON of {release: {"path in the tree": sha256}}: every file its series changes there."""
    return Path(importlib.import_module(overlay.name).__file__).resolve().parent / "fingerprints.json"


def recorded(overlay: Overlay) -> dict[str, dict[str, str]]:
    """The sha256 of each file the overlay derives, per supported release (``python -m patchset_overlay fingerprints``
    makes them from an unpatched release); empty when it has none."""
    path = fingerprints_path(overlay)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def refused(overlay: Overlay, name: str, why: str) -> Verdict:
    """Piece ``name`` left off, in the user's words: why, and that the upstream was left untouched."""
    return Verdict(PieceState.REFUSED, f"{overlay.name}: {name} not applied: {why}; {overlay.upstream} left untouched")


def _carries(plan: Plan, files: list[str], recorded: Mapping[str, str]) -> bool:
    """Whether every file the piece changes already holds the series (a patched tree): taking the series' patches
    back off it, last first, gives the pinned sdist's file (or, for a release with none recorded, takes back)."""
    for path in files:
        try:
            text = plan.installed_text(path)
            for patch in reversed(plan.patches):
                if path in patch.files:
                    text = apply_hunks(text, patch.files[path], reverse=True, where=path)
        except (OSError, HunkError):
            return False
        if path in recorded and sha256(text) != recorded[path]:
            return False
    return bool(files)  # a piece that changes no file here carries nothing


def judge(plan: Plan, piece: Piece, recorded: Mapping[str, str]) -> Verdict:
    """Whether ``piece`` may go onto the release in ``plan``, and why not if it may not; ``recorded``: the sha256 of
    that release's files (empty for a release the overlay does not support)."""
    overlay = plan.overlay
    what = f"{overlay.distribution} {plan.version}"
    patches = plan.pieces_patches(piece)
    upstream = [patch for patch in plan.upstream if patch.slug in piece.patches]
    if upstream and not patches:  # by the release: also one the overlays do not support
        since = upstream[0].applied_upstream
        return Verdict(
            PieceState.UPSTREAM_HAS_FIX,
            f"{overlay.name}: {piece.name} stays off: {what} has the fix (upstream since {since})",
        )
    if plan.series is not None and not patches:
        return Verdict(
            PieceState.OTHER_RELEASE,
            f"{overlay.name}: {piece.name}: {what}'s series ({plan.series}) has none of its patches",
        )
    files = plan.files(patches)
    if _carries(plan, files, recorded):
        return Verdict(
            PieceState.UPSTREAM_HAS_FIX,
            f"{overlay.name}: {piece.name} stays off: {what} already has the patches of this piece "
            "(a patched tree or wheel)",
        )
    if plan.series is None or not recorded:
        supported = ", ".join(release_series(overlay.distribution))
        return refused(overlay, piece.name, f"{what} is not a supported version (supported: {supported})")
    unfit = piece.unfit(plan.source) if piece.unfit is not None else None
    if unfit is not None:
        return refused(overlay, piece.name, unfit)
    for path in files:
        expected = recorded.get(path, "none recorded")
        try:
            found = sha256(plan.installed_text(path))
        except OSError as error:
            found = f"unreadable ({error})"
        if found != expected:
            why = f"{path} in {what} is not the file this overlay was made for"
            return refused(overlay, piece.name, f"{why} (sha256 {found[:16]}, expected {expected[:16]})")
    return Verdict(PieceState.ACTIVE, f"fits {what}")
