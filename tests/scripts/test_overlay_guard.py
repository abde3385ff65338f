"""`patchset_overlay.guard`: what `status` says of a piece written for other releases of a supported upstream.

Invariant, on the verl overlay's own spec (no upstream installed: the guard decides this from the version alone): on a
release a piece is not written for, the reason names the piece that release takes instead (one that changes the same
upstream objects), or says that it has none, never that it takes one it lacks (verl 0.7.1 has no piece of the
distillation fix or of the mini-batch statistics: its series carries neither).
"""

from __future__ import annotations

import pytest

import verl_overlay
from patchset_overlay.guard import for_release, judge
from patchset_overlay.state import PieceState


class _Release:
    """An upstream on disk as the guard reads it, reduced to its version."""

    def __init__(self, version: str) -> None:
        self._version = version

    def version(self) -> str:
        return self._version


def _reasons(version: str) -> dict[str, str]:
    """The reason given for each piece written for other releases than ``version`` (but those whose fix upstream
    has there: they say so first)."""
    overlay = verl_overlay.overlay()
    others = [piece for piece in overlay.pieces if not for_release(piece, version)]
    verdicts = {piece.name: judge(overlay, piece, _Release(version), {}) for piece in others}
    return {name: verdict.reason for name, verdict in verdicts.items() if verdict.state is PieceState.OTHER_RELEASE}


@pytest.mark.parametrize(
    ("version", "piece", "said"),
    [
        ("0.7.1", "0001-trainer-critic-value-loss-global-normalization", "takes its own piece (verl-0.7-0001-"),
        ("0.9.1", "mini-batch-statistics", "takes its own piece (mini-batch-statistics-v0.9)"),
        ("0.7.1", "mini-batch-statistics", "takes its own piece (mini-batch-statistics-v0.7)"),
        ("0.7.1", "0002-algo-micro-batch-normalization-distillation-loss", "verl 0.7.1 has no piece of these patches"),
    ],
)
def test_a_piece_for_other_releases_names_the_piece_taken_instead_or_says_there_is_none(version, piece, said):
    assert said in _reasons(version)[piece]
