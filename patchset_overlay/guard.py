"""Never patch blind: decide, once and for the whole piece, whether it fits the upstream on disk.

The order matters: a release that has the piece's patches upstream is reported as such, a release whose series has
none of them as that, a tree that already carries them (a patched checkout or wheel) as having the fix (not as a
mismatch, although its files differ), then an unsupported version, a piece that does not fit its environment, and
any file the piece would change that is not the pinned sdist's, by sha256. Any of these leaves every file of the
piece untouched. Everything is read from the upstream's files, so the verdict does not depend on which of its modules
are imported yet.
"""

from __future__ import annotations

from collections.abc import Mapping

from patchset_overlay.derive import Plan, release_series, sha256
from patchset_overlay.hunks import HunkError, apply_hunks
from patchset_overlay.spec import Piece
from patchset_overlay.state import PieceState, Verdict


def _carries(plan: Plan, piece: Piece, recorded: Mapping[str, str]) -> bool:
    """Whether every file the piece changes already holds the series (a patched tree): taking the series' patches
    back off it, last first, gives the pinned sdist's file (or, for a release with none recorded, takes back)."""
    patches = plan.pieces_patches(piece)
    files = plan.files(patches)
    if not files:
        return False
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
    return True


def judge(plan: Plan, piece: Piece, recorded: Mapping[str, str]) -> Verdict:
    """Whether ``piece`` may go onto the release in ``plan``, and why not if it may not; ``recorded``: the sha256 of
    that release's files (empty for a release the overlay does not support)."""
    overlay = plan.overlay
    what = f"{overlay.distribution} {plan.version}"
    upstream = [patch for patch in plan.upstream if patch.slug in piece.patches]
    if upstream and not plan.pieces_patches(piece):  # by the release: also one the overlays do not support
        since = upstream[0].applied_upstream
        return Verdict(
            PieceState.UPSTREAM_HAS_FIX,
            f"{overlay.name}: {piece.name} stays off: {what} has the fix (upstream since {since})",
        )
    if plan.series is not None and not plan.pieces_patches(piece):
        return Verdict(
            PieceState.OTHER_RELEASE,
            f"{overlay.name}: {piece.name}: {what}'s series ({plan.series}) has none of its patches",
        )
    if _carries(plan, piece, recorded):
        return Verdict(
            PieceState.UPSTREAM_HAS_FIX,
            f"{overlay.name}: {piece.name} stays off: {what} already has the patches of this piece "
            "(a patched tree or wheel)",
        )
    if plan.series is None or not recorded:
        supported = ", ".join(release_series(overlay.distribution))
        return Verdict(
            PieceState.REFUSED,
            f"{overlay.name}: {piece.name} not applied: {what} is not a supported version (supported: {supported}); "
            f"{overlay.upstream} left untouched",
        )
    unfit = piece.unfit(plan.source) if piece.unfit is not None else None
    if unfit is not None:
        return Verdict(
            PieceState.REFUSED, f"{overlay.name}: {piece.name} not applied: {unfit}; {overlay.upstream} left untouched"
        )
    for path in plan.files(plan.pieces_patches(piece)):
        expected = recorded.get(path, "none recorded")
        try:
            found = sha256(plan.installed_text(path))
        except OSError as error:
            found = f"unreadable ({error})"
        if found != expected:
            return Verdict(
                PieceState.REFUSED,
                f"{overlay.name}: {piece.name} not applied: {path} in {what} is not the file this overlay was made "
                f"for (sha256 {found[:16]}, expected {expected[:16]}); {overlay.upstream} left untouched",
            )
    return Verdict(PieceState.ACTIVE, f"fits {what}")
