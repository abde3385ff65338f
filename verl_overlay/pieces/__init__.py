"""The verl overlay's pieces, one file each (one per patch of patches/verl/, or per patches that change the same
symbols: its targets, the release that has its fix, how to tell a tree has it, its installers), and the overlay's
spec that lists them in order. A patch whose targets' code differs on another release has a piece per release
(``releases``): critic (0.8.0) and critic_v0_7 (0.7.1, the verl-0.7 series' 0001); mini_batch_statistics (0004 and
0005 on 0.8.0), mini_batch_statistics_v0_9 (0.9.1) and mini_batch_statistics_v0_7 (0.7.1, the verl-0.7 series' 0003
and 0004), whose engine worker methods differ; distillation has no target on 0.7.1 (verl 0.7 has no on-policy
distillation).

The patched code itself stays in the mirrored modules (``verl_overlay/trainer/...``, ``verl_overlay/workers/...``):
they keep verl's module layout, so each is read beside the upstream module it mirrors. Adding a piece: its file here,
its name in ``OVERLAY.pieces``, its upstream modules in ``verl_overlay.WATCHED`` if new, its mirrored code, and the
fingerprints, made by ``python -m patchset_overlay fingerprints --write``.
"""

from __future__ import annotations

from patchset_overlay.spec import Overlay
from verl_overlay.pieces import (
    critic,
    critic_v0_7,
    critic_yaml,
    distillation,
    geo_mean,
    mini_batch_statistics,
    mini_batch_statistics_v0_7,
    mini_batch_statistics_v0_9,
)

OVERLAY = Overlay(
    name="verl_overlay",
    upstream="verl",
    distribution="verl",
    supported=("0.7.1", "0.8.0", "0.9.1"),
    pieces=(
        critic.PIECE,
        critic_v0_7.PIECE,
        distillation.PIECE,
        geo_mean.PIECE,
        mini_batch_statistics.PIECE,
        mini_batch_statistics_v0_7.PIECE,
        mini_batch_statistics_v0_9.PIECE,
    ),
    cannot_change=critic_yaml.NOT_CHANGED,
    other_parts=critic_yaml.status,
)
