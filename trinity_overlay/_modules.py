"""Trinity's modules the overlay changes, in one place: the pieces name them, the start-up import finder watches
them (so this module imports nothing)."""

from __future__ import annotations

POLICY_LOSS_FN = "trinity.algorithm.policy_loss_fn.policy_loss_fn"
DPO_LOSS = "trinity.algorithm.policy_loss_fn.dpo_loss"
REC_LOSS = "trinity.algorithm.policy_loss_fn.rec_policy_loss"
MIX_LOSS = "trinity.algorithm.policy_loss_fn.mix_policy_loss"
CHORD_LOSS = "trinity.algorithm.policy_loss_fn.chord_policy_loss"
LOSSES = "trinity.trainer.verl.losses"
TRAINER = "trinity.trainer.verl.trainer"
ALGORITHM = "trinity.algorithm.algorithm"

WATCHED = (POLICY_LOSS_FN, DPO_LOSS, REC_LOSS, MIX_LOSS, CHORD_LOSS, LOSSES, TRAINER, ALGORITHM)
