"""Activation: post-import hooks (wrapt's) that install each piece once all its upstream modules are imported.

A piece is installed when the last of its modules has finished importing, whether that happened before or after
`activate` was called (wrapt runs the hook at once for a module already imported). It is judged first
(`patchset_overlay.guard`) and installed whole or not at all.
"""

from __future__ import annotations

import sys
import warnings
from functools import partial
from types import ModuleType

from patchset_overlay.guard import Verdict, judge
from patchset_overlay.spec import Overlay, Piece
from patchset_overlay.state import OverlayRecord, PieceRecord, PieceState, record_for


class OverlayWarning(UserWarning):
    """An overlay left upstream untouched (unsupported version, unknown code) or found the fix already there."""


def _warn_once(record: OverlayRecord, message: str) -> None:
    if message not in record.warned:
        record.warned.add(message)
        warnings.warn(message, OverlayWarning, stacklevel=3)


def _try_piece(overlay: Overlay, piece: Piece, record: OverlayRecord) -> None:
    piece_record = record.pieces.setdefault(piece.patch, PieceRecord())
    if piece_record.state is not PieceState.PENDING:
        return
    if not all(module in record.imported for module in (overlay.upstream, *piece.modules)):
        return
    modules: dict[str, ModuleType] = {name: sys.modules[name] for name in (overlay.upstream, *piece.modules)}
    try:
        verdict = judge(overlay, piece, modules)
    except Exception as error:  # runs inside someone's import: a failed check refuses, it never breaks the import
        verdict = Verdict(
            PieceState.REFUSED,
            f"{overlay.name}: {piece.patch} not applied: could not check {overlay.upstream} ({error!r}); "
            f"{overlay.upstream} left untouched",
        )
    if verdict.state is PieceState.ACTIVE:
        undo: list = []
        try:
            piece.install(modules, undo)
        except Exception as error:  # an install that fails half-way is rolled back, never left half-done
            for step in reversed(undo):
                step()
            piece_record.state, piece_record.reason = (
                PieceState.REFUSED,
                f"{overlay.name}: {piece.patch} not applied: {error}; {overlay.upstream} left untouched",
            )
            _warn_once(record, piece_record.reason)
            return
        piece_record.state, piece_record.reason, piece_record.undo = PieceState.ACTIVE, verdict.reason, undo
        return
    piece_record.state, piece_record.reason = verdict.state, verdict.reason
    _warn_once(record, verdict.reason)


def _on_import(overlay: Overlay, module: ModuleType) -> None:
    record = record_for(overlay.name)
    record.imported.add(module.__name__)
    if record.enabled:
        for piece in overlay.pieces:
            _try_piece(overlay, piece, record)


def activate(overlay: Overlay, how: str = "explicit") -> bool:
    """Switch ``overlay`` on in this process; False (and nothing done) if it is on already."""
    import wrapt

    record = record_for(overlay.name)
    if record.enabled:
        return False
    record.enabled, record.how = True, how
    for piece in overlay.pieces:
        record.pieces[piece.patch] = PieceRecord(PieceState.PENDING, "waiting for its upstream modules to be imported")
    if not record.hooks_registered:
        record.hooks_registered = True
        names = dict.fromkeys(name for piece in overlay.pieces for name in (overlay.upstream, *piece.modules))
        for name in names:
            wrapt.register_post_import_hook(partial(_on_import, overlay), name)
    else:
        for piece in overlay.pieces:
            _try_piece(overlay, piece, record)
    return True


def deactivate(overlay: Overlay) -> bool:
    """Switch ``overlay`` off: undo every installed piece exactly; False if it was not on."""
    record = record_for(overlay.name)
    if not record.enabled:
        return False
    record.enabled = False
    for piece in reversed(overlay.pieces):
        piece_record = record.pieces.get(piece.patch)
        if piece_record is None:
            continue
        for step in reversed(piece_record.undo):
            step()
        record.pieces[piece.patch] = PieceRecord(PieceState.INACTIVE, "deactivated in this process")
    return True


def piece_states(overlay: Overlay) -> dict[str, PieceRecord]:
    record = record_for(overlay.name)
    return {piece.patch: record.pieces.get(piece.patch, PieceRecord()) for piece in overlay.pieces}
