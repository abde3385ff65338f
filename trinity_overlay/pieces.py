"""The Trinity overlay's pieces. Patches that change the same symbols form one piece, mirrored as the finished
series leaves them (a piece is all or nothing, so no intermediate state of a symbol is ever needed):

- policy-loss normalization (0001, 0003, 0005): `TrinityPolicyLoss` weights each term by its share of the global
  mini-batch; each policy loss declares its `loss_aggregation` (a loss that takes the engine's batch info as
  runtime keys normalizes itself, and `PolicyLossFnMeta` passes those keys through); MIX / MIX_CHORD warn at start-up;
- DPO pairs and steps, and the legacy path (0002, 0004, 0006, 0007, 0008): one DPO logit per chosen/rejected pair,
  pairs kept in one micro-batch (`group_size`, passed by `VERLTrainer._update_actor` as ``force_group_size``), and
  one optimizer step per training step (the mini-batch counted in rows), on verl's engine path; DPO's configuration
  check refuses ``actor.shuffle``. Beside verl < 0.8 Trinity trains through its legacy actors, whose changes (0006,
  0007, and 0008's micro-batch weights, which change nothing else) the overlay does not mirror: the piece stays off
  there.
"""

from __future__ import annotations

from patchset_overlay.spec import Overlay, Piece, Target
from trinity_overlay import _dpo_pairs, _policy_loss
from trinity_overlay._modules import (
    ALGORITHM,
    CHORD_LOSS,
    DPO_LOSS,
    LOSSES,
    MIX_LOSS,
    POLICY_LOSS_FN,
    REC_LOSS,
    TRAINER,
)

POLICY_LOSS_NORMALIZATION = Piece(
    name="policy-loss-normalization",
    patches=(
        "0001-trainer-policy-loss-global-normalization",
        "0003-trainer-weight-each-trinitypolicyloss-term-its-own",
        "0005-trainer-warn-start-up-that-mix-mix-chord-depend",
    ),
    targets=(
        Target(POLICY_LOSS_FN, "PolicyLossFn"),
        Target(POLICY_LOSS_FN, "PolicyLossFnMeta"),
        Target(REC_LOSS, "RECPolicyLossFn"),
        Target(MIX_LOSS, "MIXPolicyLossFn"),
        Target(CHORD_LOSS, "MIXCHORDPolicyLossFn"),
        Target(DPO_LOSS, "DPOLossFn"),
        Target(LOSSES, "TrinityPolicyLoss"),
    ),
    installers={
        POLICY_LOSS_FN: _policy_loss.install_policy_loss_fn,
        REC_LOSS: _policy_loss.install_loss_aggregation,
        MIX_LOSS: _policy_loss.install_loss_aggregation,
        CHORD_LOSS: _policy_loss.install_loss_aggregation,
        DPO_LOSS: _policy_loss.install_loss_aggregation,
        LOSSES: _policy_loss.install_trinity_policy_loss,
    },
    upstream_has_fix=_policy_loss.upstream_has_policy_loss_fix,
)

DPO = Piece(
    name="dpo-pairs-and-steps",
    patches=(
        "0002-algorithm-fix-dpo-compute-one-logit-per-chosen",
        "0004-trainer-keep-dpo-pairs-one-micro-batch-under-verl",
        "0006-trainer-keep-dpo-pairs-whole-legacy-actors",
        "0007-trainer-make-one-dpo-training-step-one-optimizer",
        # the legacy actors' weights: nothing to mirror on verl's engine path, where this piece is active; beside
        # verl < 0.8, where those actors run, the piece stays off and says that it does not mirror them
        "0008-trainer-weight-each-legacy-micro-batch-loss-term",
    ),
    targets=(
        Target(POLICY_LOSS_FN, "PolicyLossFn"),
        Target(DPO_LOSS, "DPOLossFn"),
        Target(TRAINER, "VERLTrainer"),
        Target(ALGORITHM, "DPOAlgorithm"),
    ),
    installers={
        POLICY_LOSS_FN: _dpo_pairs.install_group_size,
        DPO_LOSS: _dpo_pairs.install_dpo_loss,
        TRAINER: _dpo_pairs.install_verl_trainer,
        ALGORITHM: _dpo_pairs.install_dpo_algorithm,
    },
    upstream_has_fix=_dpo_pairs.upstream_has_dpo_fix,
    unfit=_dpo_pairs.beside_legacy_verl,
)

OVERLAY = Overlay(
    name="trinity_overlay",
    upstream="trinity",
    distribution="trinity-rft",
    supported=("0.6.0",),
    pieces=(POLICY_LOSS_NORMALIZATION, DPO),
)
