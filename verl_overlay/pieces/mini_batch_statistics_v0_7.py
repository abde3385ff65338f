"""Pieces 0003 and 0004 of the verl-0.7 series on verl 0.7.1: `verl_overlay.pieces.mini_batch_statistics` (verl 0004
and 0005 on 0.8.0, the same fixes) with 0.7.1's ``compute_rollout_correction_weights``
(``verl_overlay/trainer/ppo/rollout_corr_helper_v0_7.py``), ``ppo_loss`` (``workers/utils/losses_v0_7.py``) and
engine worker methods (``workers/engine_workers_v0_7.py``), whose code differs from 0.8.0's; the losses, the
selection functions, the IS mean and ``ActorConfig.policy_loss_inputs`` are the 0.8.0 piece's.

It covers 0.7.1's engine path (``trainer.use_legacy_worker_impl: disable``), as the series does; the legacy workers
(0.7.1's default) are not patched: docs/loss-audit.md says why.
"""

from __future__ import annotations

from dataclasses import replace

from verl_overlay.pieces.mini_batch_statistics import (
    ENGINE_WORKERS,
    LOSSES,
    ROLLOUT_CORR,
    engine_workers_installer,
    ppo_loss_installer,
    rollout_corr_installer,
)
from verl_overlay.pieces.mini_batch_statistics import PIECE as PIECE_0_8

PIECE = replace(
    PIECE_0_8,
    name="mini-batch-statistics-v0.7",
    patches=(
        "0003-algo-select-kl-cov-tokens-over-optimizer-mini",
        "0004-algo-normalize-bypass-is-weights-optimizer-mini",
    ),
    installers={
        **PIECE_0_8.installers,
        ROLLOUT_CORR: rollout_corr_installer("rollout_corr_helper_v0_7"),
        LOSSES: ppo_loss_installer("losses_v0_7"),
        ENGINE_WORKERS: engine_workers_installer("engine_workers_v0_7"),
    },
    releases=("0.7.1",),
)
