"""The verl overlay's pieces: one per patch of patches/verl/, each with its targets and per-module installers."""

from __future__ import annotations

from patchset_overlay.spec import Overlay, Piece, Target
from verl_overlay import _critic_fix
from verl_overlay._modules import CORE_ALGOS, CRITIC_CONFIG, LOSSES

CRITIC_FIX = Piece(
    name="0001-trainer-critic-value-loss-global-normalization",
    patches=("0001-trainer-critic-value-loss-global-normalization",),
    targets=(
        Target(CORE_ALGOS, "compute_value_loss"),
        Target(CRITIC_CONFIG, "CriticConfig"),
        Target(LOSSES, "value_loss"),
    ),
    installers={
        CORE_ALGOS: _critic_fix.install_compute_value_loss,
        CRITIC_CONFIG: _critic_fix.install_loss_scale_factor,
        LOSSES: _critic_fix.install_value_loss,
    },
    upstream_has_fix=_critic_fix.upstream_has_critic_fix,
)

OVERLAY = Overlay(
    name="verl_overlay",
    upstream="verl",
    distribution="verl",
    supported=("0.8.0",),
    fixed_since="0.9.0",
    pieces=(CRITIC_FIX,),
)
