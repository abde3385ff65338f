"""The verl overlay's pieces: which patches go on together, by slug (the same in every release line's series).

Each release takes the series ``patches/upstreams.toml`` pins for it, less the patches it has upstream (verl >= 0.9.0
has the critic's and the distillation loss's): 0.8.0 and 0.9.1 the verl series, 0.7.1 the verl-0.7 series, which has
no distillation patch (verl 0.7 has no on-policy distillation). 0004 and 0005 are one piece: 0005 builds on 0004's
``policy_loss_inputs`` and pre-pass. 0001's critic YAML is derived too, for Hydra (`patchset_overlay.searchpath`).
"""

from __future__ import annotations

from patchset_overlay.derive import overlay_spec
from patchset_overlay.searchpath import config_status
from patchset_overlay.spec import Piece
from verl_overlay import WATCHED

OVERLAY = overlay_spec(
    "verl_overlay",
    "verl",
    "verl",
    WATCHED,
    (
        Piece("critic", ("trainer-critic-value-loss-global-normalization",)),
        Piece("distillation", ("algo-micro-batch-normalization-distillation-loss",)),
        Piece("geo-mean", ("algo-normalize-geo-mean-policy-loss-global-mini",)),
        Piece(
            "mini-batch-statistics",
            ("algo-select-kl-cov-tokens-over-optimizer-mini", "algo-normalize-bypass-is-weights-optimizer-mini"),
        ),
    ),
    config_dir="verl/trainer/config",
    cannot_change=(
        "files on disk: verl's trainer/config/_generated_ppo_*.yaml reference configs, and critic/critic.yaml read by "
        "path rather than through Hydra's search path, stay upstream's (they lack critic.loss_scale_factor)"
    ),
    other_parts=config_status,
)
