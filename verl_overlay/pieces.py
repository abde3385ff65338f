"""The verl overlay's pieces: one per patch of patches/verl/, each with its targets and per-module installers."""

from __future__ import annotations

from patchset_overlay.spec import Overlay, Piece, Target
from verl_overlay import _critic_fix, _distillation_fix, _geo_mean_fix
from verl_overlay._modules import CORE_ALGOS, CRITIC_CONFIG, DISTILLATION_LOSSES, LOSSES

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
    fixed_since="0.9.0",
)

DISTILLATION_FIX = Piece(
    name="0002-algo-micro-batch-normalization-distillation-loss",
    patches=("0002-algo-micro-batch-normalization-distillation-loss",),
    targets=(Target(DISTILLATION_LOSSES, "distillation_loss"),),
    installers={DISTILLATION_LOSSES: _distillation_fix.install_distillation_loss},
    upstream_has_fix=_distillation_fix.upstream_has_distillation_fix,
    fixed_since="0.9.0",
)

GEO_MEAN_FIX = Piece(
    name="0003-algo-normalize-geo-mean-policy-loss-global-mini",
    patches=("0003-algo-normalize-geo-mean-policy-loss-global-mini",),
    targets=(Target(CORE_ALGOS, "compute_policy_loss_geo_mean"),),
    installers={CORE_ALGOS: _geo_mean_fix.install_geo_mean},
    upstream_has_fix=_geo_mean_fix.upstream_has_geo_mean_fix,
)

OVERLAY = Overlay(
    name="verl_overlay",
    upstream="verl",
    distribution="verl",
    supported=("0.8.0", "0.9.1"),
    pieces=(CRITIC_FIX, DISTILLATION_FIX, GEO_MEAN_FIX),
)
