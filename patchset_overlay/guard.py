"""Never patch blind: decide, before anything is replaced, whether a piece fits the upstream in this process.

The order matters: an upstream that already has the fix is reported as such (not as a mismatch, although its
code differs), then an unsupported version, then any object whose source is not the one the piece was written
for. Any of these leaves every object of the piece untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from patchset_overlay.spec import Overlay, Piece, source_fingerprint
from patchset_overlay.state import PieceState


@dataclass(frozen=True)
class Verdict:
    state: PieceState
    reason: str


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


def upstream_version(overlay: Overlay, modules: Mapping[str, ModuleType]) -> str:
    """The version of the upstream package actually imported (its ``__version__``), not of any installed dist."""
    package = modules.get(overlay.upstream)
    return str(getattr(package, "__version__", "unknown"))


def judge(overlay: Overlay, piece: Piece, modules: Mapping[str, ModuleType]) -> Verdict:
    """Whether ``piece`` may be installed on the imported upstream ``modules``, and why not if it may not."""
    version = upstream_version(overlay, modules)
    what = f"{overlay.distribution} {version}"
    if overlay.fixed_since and version_tuple(version) >= version_tuple(overlay.fixed_since):
        return Verdict(
            PieceState.UPSTREAM_HAS_FIX,
            f"{overlay.name}: {piece.patch} stays off: {what} has the fix (upstream since {overlay.fixed_since})",
        )
    reason = piece.upstream_has_fix(modules)
    if reason is not None:
        return Verdict(PieceState.UPSTREAM_HAS_FIX, f"{overlay.name}: {piece.patch} stays off: {what} {reason}")
    if version not in overlay.supported:
        return Verdict(
            PieceState.REFUSED,
            f"{overlay.name}: {piece.patch} not applied: {what} is not a supported version (supported: "
            f"{', '.join(overlay.supported)}); {overlay.upstream} left untouched",
        )
    for target in piece.targets:
        try:
            found = source_fingerprint(target.resolve(modules))
        except (AttributeError, OSError, TypeError) as error:
            found = f"unreadable ({error})"
        if found != target.fingerprint:
            return Verdict(
                PieceState.REFUSED,
                f"{overlay.name}: {piece.patch} not applied: {target.label} in {what} is not the code this overlay "
                f"was written for (source sha256 {found[:16]}, expected {target.fingerprint[:16]}); "
                f"{overlay.upstream} left untouched",
            )
    return Verdict(PieceState.ACTIVE, f"replaces {', '.join(target.label for target in piece.targets)}")
