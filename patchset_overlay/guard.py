"""Never patch blind: decide, once and for the whole piece, whether it fits the upstream on disk.

The order matters: an upstream that already has the fix is reported as such (not as a mismatch, although its
code differs), a piece written for other releases as that (naming the piece this release takes, if any), then an
unsupported version, then any target whose source is not the one the piece was written for. Any of these leaves
every target of the piece untouched. Everything is read from the upstream's files (`patchset_overlay.source`), so
the verdict does not depend on which of its modules are imported yet.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from patchset_overlay.source import SourceError, UpstreamSource
from patchset_overlay.spec import Overlay, Piece
from patchset_overlay.state import PieceState, Verdict


def version_tuple(version: str) -> tuple[int, ...]:
    """Leading numeric release parts of a version ("0.9.1rc1" -> (0, 9, 1)); enough to compare releases."""
    parts = []
    for part in version.split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(parts)


def fixed_in(piece: Piece, version: str) -> bool:
    """Whether the upstream release ``version`` has the piece's fix (it is at or past ``fixed_since``)."""
    return piece.fixed_since is not None and version_tuple(version) >= version_tuple(piece.fixed_since)


def for_release(piece: Piece, version: str) -> bool:
    """Whether ``piece`` is written for release ``version`` (every release, unless it names its own)."""
    return piece.releases is None or version in piece.releases


def _same_targets(piece: Piece, other: Piece) -> bool:
    """Whether two pieces change an upstream object in common: one release's form of the other's fix."""
    return bool({(t.module, t.name) for t in piece.targets} & {(t.module, t.name) for t in other.targets})


def fingerprint_key(module: str, name: str) -> str:
    return f"{module}:{name}"


def judge(overlay: Overlay, piece: Piece, source: UpstreamSource, fingerprints: Mapping[str, str]) -> Verdict:
    """Whether ``piece`` may be installed on the upstream in ``source``, and why not if it may not;
    ``fingerprints``: those recorded for the release ``source`` declares."""
    version = source.version()
    what = f"{overlay.distribution} {version}"
    if fixed_in(piece, version):
        return Verdict(
            PieceState.UPSTREAM_HAS_FIX,
            f"{overlay.name}: {piece.name} stays off: {what} has the fix (upstream since {piece.fixed_since})",
        )
    if version in overlay.supported and not for_release(piece, version):
        own = [other.name for other in overlay.pieces if for_release(other, version) and _same_targets(other, piece)]
        covered = f"takes its own piece ({', '.join(own)})" if own else "has no piece of these patches"
        return Verdict(
            PieceState.OTHER_RELEASE,
            f"{overlay.name}: {piece.name} is for {overlay.distribution} {', '.join(piece.releases or ())}; "
            f"{what} {covered}",
        )
    reason = piece.upstream_has_fix(source)
    if reason is not None:
        return Verdict(PieceState.UPSTREAM_HAS_FIX, f"{overlay.name}: {piece.name} stays off: {what} {reason}")
    if version not in overlay.supported:
        return Verdict(
            PieceState.REFUSED,
            f"{overlay.name}: {piece.name} not applied: {what} is not a supported version (supported: "
            f"{', '.join(overlay.supported)}); {overlay.upstream} left untouched",
        )
    unfit = piece.unfit(source) if piece.unfit is not None else None
    if unfit is not None:
        return Verdict(
            PieceState.REFUSED, f"{overlay.name}: {piece.name} not applied: {unfit}; {overlay.upstream} left untouched"
        )
    for target in piece.targets:
        expected = fingerprints.get(fingerprint_key(target.module, target.name), "none recorded")
        try:
            found = source.fingerprint(target.module, target.name)
        except SourceError as error:
            found = f"unreadable ({error})"
        if found != expected:
            return Verdict(
                PieceState.REFUSED,
                f"{overlay.name}: {piece.name} not applied: {target.label} in {what} is not the code this overlay "
                f"was written for (source sha256 {found[:16]}, expected {expected[:16]}); "
                f"{overlay.upstream} left untouched",
            )
    return Verdict(PieceState.ACTIVE, f"fits {what}")
