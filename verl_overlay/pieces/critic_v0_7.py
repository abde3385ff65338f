"""Piece 0001 of the verl-0.7 series, the critic fix on verl 0.7.1: the same patch as `verl_overlay.pieces.critic`
(0.8.0), with 0.7.1's ``value_loss``. ``compute_value_loss`` is the same code in both releases, and
``CriticConfig.loss_scale_factor`` the same field, so those installers are the 0.8.0 piece's; only ``value_loss``
gets 0.7.1's patched code (``verl_overlay/workers/utils/losses_v0_7.py``).

Hydra's critic YAML part (`verl_overlay.pieces.critic_yaml`) is made from 0.8.0's ``critic.yaml`` and is not used on
0.7.1 (its file differs): there ``critic.loss_scale_factor`` defaults to None rather than following the actor's, as
status says; set it in the critic's config to use it.
"""

from __future__ import annotations

from dataclasses import replace

from verl_overlay.pieces.critic import LOSSES, value_loss_installer
from verl_overlay.pieces.critic import PIECE as PIECE_0_8

RELEASES = ("0.7.1",)

# the 0.8.0 piece (its patch, targets, fix check, fixed_since) with its own name, release and value_loss mirror
PIECE = replace(
    PIECE_0_8,
    name="verl-0.7-0001-trainer-critic-value-loss-global-normalization",
    installers={**PIECE_0_8.installers, LOSSES: value_loss_installer("losses_v0_7")},
    releases=RELEASES,
)
