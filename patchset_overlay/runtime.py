"""Activation: each target is changed the moment its own module has finished importing, in any process and order.

When the first watched module is imported, every piece is judged (`guard`) and the active pieces derived; a change
that fails takes its whole piece back out, and the piece is refused. What each overlay did is recorded per process
(`record_for`), for `status` and for undo: the one global state overlays need.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType

from patchset_overlay import startup
from patchset_overlay.derive import Plan
from patchset_overlay.guard import judge, recorded, refused
from patchset_overlay.install import apply_change
from patchset_overlay.spec import Overlay, Piece, PieceState, UpstreamSource, Verdict


@dataclass
class PieceRecord:
    state: PieceState = PieceState.INACTIVE
    reason: str = "not activated in this process"
    # upstream module -> the undo steps of its installer, for each target module changed so far
    undo: dict[str, list[Callable[[], None]]] = field(default_factory=dict)


@dataclass
class OverlayRecord:
    enabled: bool = False
    judged: bool = False
    pieces: dict[str, PieceRecord] = field(default_factory=dict)
    warned: set[str] = field(default_factory=set)
    how: str = ""  # how it was activated: "explicit" or "automatic (...)"
    plan: Plan | None = None  # the plan of the installed release, once judged


RECORDS: dict[str, OverlayRecord] = {}


def record_for(name: str) -> OverlayRecord:
    return RECORDS.setdefault(name, OverlayRecord())


class OverlayWarning(UserWarning):
    """An overlay left upstream untouched (unsupported version, unknown code) or found the fix already there."""


def _warn_once(record: OverlayRecord, message: str) -> None:
    if message not in record.warned:
        record.warned.add(message)
        warnings.warn(message, OverlayWarning, stacklevel=3)


def verdicts(overlay: Overlay) -> tuple[Plan | None, dict[str, Verdict]]:
    """The plan of the installed release and each piece's verdict, its patches derived for the active ones; a check
    that cannot be made refuses (this often runs inside someone's import, which it must never break)."""
    try:
        source = UpstreamSource.find(overlay.upstream)
        if source is None:
            missing = Verdict(PieceState.REFUSED, f"{overlay.name}: {overlay.distribution} is not installed")
            return None, {piece.name: missing for piece in overlay.pieces}
        plan = Plan.make(overlay, source)
        fingerprints = recorded(overlay).get(plan.version, {})
    except Exception as error:
        failed = Verdict(
            PieceState.REFUSED,
            f"{overlay.name}: not applied: could not read what to check ({error!r}); {overlay.upstream} left untouched",
        )
        return None, {piece.name: failed for piece in overlay.pieces}
    found = {}
    for piece in overlay.pieces:
        try:
            found[piece.name] = judge(plan, piece, fingerprints)
        except Exception as error:
            found[piece.name] = refused(overlay, piece.name, f"could not check {overlay.upstream} ({error!r})")
    active = [piece for piece in overlay.pieces if found[piece.name].state is PieceState.ACTIVE]
    try:
        failures = plan.derive(active)
    except Exception as error:
        failures = {piece.name: f"could not derive its patches ({error!r})" for piece in active}
    for name, why in failures.items():
        found[name] = refused(overlay, name, why)
    return plan, found


def judge_pieces(overlay: Overlay) -> OverlayRecord:
    """Decide every piece of an enabled overlay, once per activation, before any target is changed; its record."""
    record = record_for(overlay.name)
    if not record.enabled or record.judged:
        return record
    record.judged = True
    record.plan, judged = verdicts(overlay)
    for name, verdict in judged.items():
        record.pieces[name] = PieceRecord(verdict.state, verdict.reason)
        if verdict.state not in (PieceState.ACTIVE, PieceState.OTHER_RELEASE):  # the latter: nothing to warn of
            _warn_once(record, verdict.reason)
    return record


def _take_out(piece_record: PieceRecord) -> None:
    for module in reversed(list(piece_record.undo)):
        for step in reversed(piece_record.undo.pop(module)):
            step()


def _install(overlay: Overlay, piece: Piece, module: ModuleType) -> None:
    record = record_for(overlay.name)
    piece_record = record.pieces[piece.name]
    if piece_record.state is not PieceState.ACTIVE or module.__name__ in piece_record.undo:
        return
    steps = piece_record.undo[module.__name__] = []
    try:
        derived = record.plan.derived[record.plan.module_path(module.__name__)]
        for change in record.plan.piece_changes(piece, module.__name__):
            steps.append(apply_change(module, derived, change))
    except Exception as error:  # never half-done: the piece comes out of every module it had changed
        _take_out(piece_record)
        piece_record.state = PieceState.REFUSED
        piece_record.reason = refused(overlay, piece.name, str(error)).reason
        _warn_once(record, piece_record.reason)


def _module_imported(overlay: Overlay, module: ModuleType) -> None:
    record = judge_pieces(overlay)
    for piece in overlay.pieces:
        if record.enabled and record.plan is not None and module.__name__ in record.plan.piece_modules(piece):
            _install(overlay, piece, module)


def dispatch(module: ModuleType) -> None:
    """Called by the import finder when a watched module has finished importing; never breaks that import."""
    try:
        for overlay in startup.overlays():
            if module.__name__ in overlay.modules:
                _module_imported(overlay, module)
    except Exception as error:
        print(f"warning: patchset_overlay: {module.__name__} left as upstream has it: {error!r}", file=sys.stderr)


def activate(overlay: Overlay, how: str = "explicit") -> bool:
    """Switch ``overlay`` on in this process; False (and nothing done) if it is on already."""
    record = record_for(overlay.name)
    if record.enabled:
        return False
    record.enabled, record.how, record.judged = True, how, False
    for piece in overlay.pieces:
        record.pieces[piece.name] = PieceRecord(PieceState.PENDING, f"judged when {overlay.upstream} is first imported")
    startup.install(overlay.modules, dispatch)
    for module in startup.already_imported(overlay.modules):
        _module_imported(overlay, module)
    return True


def activate_all(how: str = "explicit") -> None:
    """Switch every registered overlay on in this process (idempotent)."""
    for overlay in startup.overlays():
        activate(overlay, how)


def deactivate(overlay: Overlay) -> bool:
    """Switch ``overlay`` off: undo every change it made, exactly; False if it was not on."""
    record = record_for(overlay.name)
    if not record.enabled:
        return False
    record.enabled, record.judged = False, False
    for piece in reversed(overlay.pieces):
        _take_out(record.pieces.get(piece.name, PieceRecord()))
        record.pieces[piece.name] = PieceRecord(PieceState.INACTIVE, "deactivated in this process")
    return True


def switched_on(overlay: Overlay) -> tuple[bool, str]:
    """Whether ``overlay`` is on here, and how (or why not); under automatic activation, a caller that comes before
    any watched import (Hydra composing a config first thing) activates the overlays, as that import would have."""
    record = record_for(overlay.name)
    if record.enabled:
        return True, record.how
    if startup.outcome == startup.AUTOMATIC:
        activate_all(startup.AUTOMATIC)
        return record.enabled, record.how
    if startup.switched_off():
        return False, f"switched off by {startup.ENV_SWITCH}"
    return False, record.how or f"{overlay.name} is not activated in this process"
