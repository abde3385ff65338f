"""Trinity's module names the pieces change, in one place (the specs name them; the installers look them up)."""

from __future__ import annotations

POLICY_LOSS_FN = "trinity.algorithm.policy_loss_fn.policy_loss_fn"
DPO_LOSS = "trinity.algorithm.policy_loss_fn.dpo_loss"
REC_LOSS = "trinity.algorithm.policy_loss_fn.rec_policy_loss"
MIX_LOSS = "trinity.algorithm.policy_loss_fn.mix_policy_loss"
CHORD_LOSS = "trinity.algorithm.policy_loss_fn.chord_policy_loss"
LOSSES = "trinity.trainer.verl.losses"
TRAINER = "trinity.trainer.verl.trainer"
