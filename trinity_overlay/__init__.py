"""Overlay of the Trinity-RFT series for a pip-installed trinity-rft 0.6.0; it holds no Trinity code."""

from __future__ import annotations

from patchset_overlay import overlay_functions

# the Trinity modules the series changes on verl's engine path (read at every interpreter start by the finder)
WATCHED = (
    "trinity.algorithm.policy_loss_fn.policy_loss_fn",
    "trinity.algorithm.policy_loss_fn.dpo_loss",
    "trinity.algorithm.policy_loss_fn.rec_policy_loss",
    "trinity.algorithm.policy_loss_fn.mix_policy_loss",
    "trinity.algorithm.policy_loss_fn.chord_policy_loss",
    "trinity.trainer.verl.losses",
    "trinity.trainer.verl.config",
    "trinity.trainer.verl.trainer",
    "trinity.trainer.verl.workers",
    "trinity.common.config",
    "trinity.algorithm.algorithm",
    "trinity.common.config_validator",
)

# its spec (`trinity_overlay.pieces.OVERLAY`), and the switches users call (``trinity_overlay.activate()``)
overlay, activate, deactivate = overlay_functions("trinity_overlay.pieces")
