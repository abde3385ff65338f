"""verl's modules the overlay changes, in one place: the pieces name them, the start-up import finder watches them
(so this module imports nothing)."""

from __future__ import annotations

CORE_ALGOS = "verl.trainer.ppo.core_algos"
CRITIC_CONFIG = "verl.workers.config.critic"
LOSSES = "verl.workers.utils.losses"
DISTILLATION_LOSSES = "verl.trainer.distillation.losses"

WATCHED = (CORE_ALGOS, CRITIC_CONFIG, LOSSES, DISTILLATION_LOSSES)
