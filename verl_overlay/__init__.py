"""Overlay of the verl fixes (patches/verl/, patches/verl-0.7/) for a pip-installed verl 0.7.1, 0.8.0 or 0.9.1.

Modules here mirror verl's module paths and hold only the patched symbols; `verl_overlay.pieces` holds one file per
piece, saying what goes where. `activate` switches the overlay on in this process (a second call does nothing),
`deactivate` undoes it; installing this project does it in every process automatically (see `patchset_overlay`,
which finds this package through ``patchset_overlay_registry``). verl >= 0.9.0 has the critic and distillation
fixes, and those pieces stay off there; verl 0.7.1 takes its own critic piece (critic_v0_7, its ``value_loss``);
the geo_mean piece goes onto all three; the mini-batch statistics (0004 and 0005) too, a piece for each release.
"""

from __future__ import annotations

from patchset_overlay import overlay_functions

WATCHED = (
    "verl.trainer.ppo.core_algos",
    "verl.workers.config.critic",
    "verl.workers.utils.losses",
    "verl.trainer.distillation.losses",
    "verl.trainer.ppo.rollout_corr_helper",
    "verl.workers.config.actor",
    "verl.workers.engine_workers",
)

# its spec (`verl_overlay.pieces.OVERLAY`), and the switches users call (``verl_overlay.activate()``)
overlay, activate, deactivate = overlay_functions("verl_overlay.pieces")
