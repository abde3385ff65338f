"""Activation: post-import hooks (wrapt's) that install each piece once all its upstream modules are imported.

A piece is installed when the last of its modules has finished importing, whether that happened before or after
`activate` was called (wrapt runs the hook at once for a module already imported); modules upstream imports only
on demand (a piece's `loads`) it imports itself at that point. It is judged first (`patchset_overlay.guard`),
goes only on top of the pieces it `requires`, and is installed whole or not at all.
"""

from __future__ import annotations

import importlib
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


def _load_lazy_modules(overlay: Overlay, piece: Piece, record: OverlayRecord) -> Verdict | None:
    """Import the piece's `loads` modules (their hooks land back in `_try_piece`, which waits for this call to end);
    a refusal if one cannot be imported."""
    record.loading.add(piece.patch)
    try:
        for name in piece.loads:
            if name not in record.imported:
                importlib.import_module(name)
    except Exception as error:
        return Verdict(
            PieceState.REFUSED,
            f"{overlay.name}: {piece.patch} not applied: could not import {name} ({error!r}); "
            f"{overlay.upstream} left untouched",
        )
    finally:
        record.loading.discard(piece.patch)
    return None


def _dependency_verdict(overlay: Overlay, piece: Piece, record: OverlayRecord) -> Verdict | None:
    """Why ``piece`` may not go on top of the pieces it requires (one is off), or None once they are all active."""
    for patch in piece.requires:
        required = record.pieces.get(patch, PieceRecord())
        if required.state is not PieceState.ACTIVE:
            return Verdict(
                PieceState.REFUSED,
                f"{overlay.name}: {piece.patch} not applied: it builds on {patch}, which is {required.state.value}; "
                f"{overlay.upstream} left untouched",
            )
    return None


def _try_piece(overlay: Overlay, piece: Piece, record: OverlayRecord) -> None:
    piece_record = record.pieces.setdefault(piece.patch, PieceRecord())
    if piece_record.state is not PieceState.PENDING or piece.patch in record.loading:
        return
    waits_for = [name for name in (overlay.upstream, *piece.modules) if name not in piece.loads]
    if not all(module in record.imported for module in waits_for):
        return
    if any(record.pieces.get(patch, PieceRecord()).state is PieceState.PENDING for patch in piece.requires):
        return  # decided later in the same hook: pieces are tried in series order
    verdict = _load_lazy_modules(overlay, piece, record)
    if piece_record.state is not PieceState.PENDING:
        return
    modules: dict[str, ModuleType] = {
        name: sys.modules[name] for name in (overlay.upstream, *piece.modules) if name in sys.modules
    }
    if verdict is None:
        try:
            verdict = judge(overlay, piece, modules)
        except Exception as error:  # runs inside someone's import: a failed check refuses, never breaks the import
            verdict = Verdict(
                PieceState.REFUSED,
                f"{overlay.name}: {piece.patch} not applied: could not check {overlay.upstream} ({error!r}); "
                f"{overlay.upstream} left untouched",
            )
    if verdict.state is PieceState.ACTIVE:
        verdict = _dependency_verdict(overlay, piece, record) or verdict
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
