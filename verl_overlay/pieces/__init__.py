"""The verl overlay's pieces, one file each (one per patch of patches/verl/: its targets, the release that has its
fix, how to tell a tree has it, its installers), and the overlay's spec that lists them in order.

The patched code itself stays in the mirrored modules (``verl_overlay/trainer/...``, ``verl_overlay/workers/...``):
they keep verl's module layout, so each is read beside the upstream module it mirrors. Adding a piece: its file here,
its name in ``OVERLAY.pieces``, its upstream modules in ``verl_overlay.WATCHED`` if new, its mirrored code, and the
fingerprints, made by ``python -m patchset_overlay fingerprints --write``.
"""

from __future__ import annotations

from patchset_overlay.spec import Overlay
from verl_overlay.pieces import critic, critic_yaml, distillation, geo_mean

OVERLAY = Overlay(
    name="verl_overlay",
    upstream="verl",
    distribution="verl",
    supported=("0.8.0", "0.9.1"),
    pieces=(critic.PIECE, distillation.PIECE, geo_mean.PIECE),
    cannot_change=critic_yaml.NOT_CHANGED,
    other_parts=critic_yaml.status,
)
