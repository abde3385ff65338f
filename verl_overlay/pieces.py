"""The verl overlay's pieces: which patches go on together, by slug (the same in every release line's series).

Each release takes its pinned series less what it has upstream (verl >= 0.9.0 has the critic's and the distillation
loss's). The mini-batch statistics are one piece: the worker's hook before each mini-batch and the hooks it runs.
"""

from __future__ import annotations

from patchset_overlay.derive import overlay_spec
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
            (
                "worker-run-policy-loss-hooks-before-each-optimizer",
                "algo-select-clip-cov-tokens-over-optimizer-mini",
                "algo-select-kl-cov-tokens-over-optimizer-mini",
                "algo-optionally-normalize-bypass-is-weights-per",
                "cfg-normalize-bypass-is-weights-per-mini-batch",
            ),
        ),
    ),
    config_dir="verl/trainer/config",
    cannot_change=(
        "files on disk: verl's trainer/config/_generated_ppo_*.yaml reference configs, and critic/critic.yaml read by "
        "path rather than through Hydra's search path, stay upstream's (they lack critic.loss_scale_factor); "
        "trainer/ppo/ray_trainer.py stays upstream's, so the worker gets no global step and Clip-Cov's draw counts "
        "the worker's updates, which restart at 0 on resume (a patched checkout or wheel passes the step)"
    ),
)
