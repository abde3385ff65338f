"""Piece 0001 of the verl-0.7 series, the critic fix on verl 0.7.1: the same patch as `verl_overlay.pieces.critic`
(0.8.0), with 0.7.1's ``value_loss``. ``compute_value_loss`` is the same code in both releases, and
``CriticConfig.loss_scale_factor`` the same field, so those installers are the 0.8.0 piece's; only ``value_loss``
gets 0.7.1's patched code (``verl_overlay/workers/utils/losses_v0_7.py``).

Hydra's critic YAML part (`verl_overlay.pieces.critic_yaml`) is made from 0.8.0's ``critic.yaml`` and is not used on
0.7.1 (its file differs): there ``critic.loss_scale_factor`` defaults to None rather than following the actor's, as
status says; set it in the critic's config to use it.
"""

from __future__ import annotations

from patchset_overlay.spec import Piece, Target
from verl_overlay.pieces.critic import (
    CORE_ALGOS,
    CRITIC_CONFIG,
    LOSSES,
    install_compute_value_loss,
    install_loss_scale_factor,
    upstream_has_critic_fix,
    value_loss_installer,
)

RELEASES = ("0.7.1",)


install_value_loss = value_loss_installer("losses_v0_7")  # 0.7.1's value_loss, its own mirror


PIECE = Piece(
    name="verl-0.7-0001-trainer-critic-value-loss-global-normalization",
    patches=("0001-trainer-critic-value-loss-global-normalization",),
    targets=(
        Target(CORE_ALGOS, "compute_value_loss"),
        Target(CRITIC_CONFIG, "CriticConfig"),
        Target(LOSSES, "value_loss"),
    ),
    installers={
        CORE_ALGOS: install_compute_value_loss,
        CRITIC_CONFIG: install_loss_scale_factor,
        LOSSES: install_value_loss,
    },
    upstream_has_fix=upstream_has_critic_fix,
    fixed_since="0.9.0",
    releases=RELEASES,
)
