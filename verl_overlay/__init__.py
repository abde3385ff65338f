"""Overlay of the verl series for a pip-installed verl 0.7.1, 0.8.0 or 0.9.1; it holds no verl code."""

from __future__ import annotations

from patchset_overlay import overlay_functions

# the verl modules the series changes (read at every interpreter start by the start-up finder)
WATCHED = (
    "verl.trainer.ppo.core_algos",
    "verl.workers.config.critic",
    "verl.workers.utils.losses",
    "verl.trainer.distillation.losses",
    "verl.trainer.ppo.rollout_corr_helper",
    "verl.workers.config.actor",
    "verl.workers.engine_workers",
    "verl.utils.config",
    "verl.trainer.config.algorithm",
)

# its spec (`verl_overlay.pieces.OVERLAY`), and the switches users call (``verl_overlay.activate()``)
overlay, activate, deactivate = overlay_functions("verl_overlay.pieces")
