"""Overlay of the Trinity-RFT policy-loss fixes (patches/trinity/) for a pip-installed trinity-rft 0.6.0.

Modules here mirror Trinity's module paths and hold only the patched symbols; each patch of the series is one
`Piece` of `OVERLAY`, in series order (a test checks that every patch has its piece). A piece that changes what an
earlier one installed (0003 over 0001, 0005 over 0003) requires it, and is refused when that one is off.
`activate` / `deactivate` switch it in this process; installing this project switches it on in every process (see
`patchset_overlay`).
"""

from __future__ import annotations

from patchset_overlay.spec import Overlay, Piece, Target
from trinity_overlay._dpo_grouping_fix import install_dpo_grouping_fix, upstream_has_dpo_grouping_fix
from trinity_overlay._dpo_pair_fix import install_dpo_pair_fix, upstream_has_dpo_pair_fix
from trinity_overlay._mix_warning_fix import install_mix_warning, upstream_has_mix_warning
from trinity_overlay._modules import CHORD_LOSS, DPO_LOSS, LOSSES, MIX_LOSS, POLICY_LOSS_FN, REC_LOSS, TRAINER
from trinity_overlay._policy_loss_fix import install_policy_loss_fix, upstream_has_policy_loss_fix
from trinity_overlay._term_weights_fix import install_term_weights_fix, upstream_has_term_weights_fix

# the trinity-rft 0.6.0 source each piece was written for (sha256 of `inspect.getsource`)
_POLICY_LOSS_FN = Target(
    POLICY_LOSS_FN, "PolicyLossFn", "776b87e808c78897b699551c003cfe606752a35475235375e960a4d3d5f46a9b"
)
_DPO = Target(DPO_LOSS, "DPOLossFn", "cc3072501bdc7486480355aa7d500213db11b9b415df8518cdb8b0dc1f1fc697")
_REC = Target(REC_LOSS, "RECPolicyLossFn", "cb2a8b559cd3cf3130d19422e3b9042797b02a1d11b654bd962a5bec3071622e")
_MIX = Target(MIX_LOSS, "MIXPolicyLossFn", "a9dbe984256f157a788ed1ead44104653a5ef39316496232ac7a2e202207a7b4")
_MIX_CHORD = Target(
    CHORD_LOSS, "MIXCHORDPolicyLossFn", "5b3dfee8b23b5f05e433479fa5d2cd4097fbdf86fe6509eeb723b91e169aba48"
)
_TRINITY_POLICY_LOSS = Target(
    LOSSES, "TrinityPolicyLoss", "559d189e547c62a280a96b396469b68bc4b7f1225626dca4f07861fe9f662965"
)
_VERL_TRAINER = Target(TRAINER, "VERLTrainer", "55c7edd6989557203301af445db3041f225bb8338e4293ec439495d47981d302")

POLICY_LOSS_FIX = Piece(
    patch="0001-trainer-policy-loss-global-normalization",
    summary="TrinityPolicyLoss weighted by its share of the global mini-batch",
    targets=(_TRINITY_POLICY_LOSS,),
    install=install_policy_loss_fix,
    upstream_has_fix=upstream_has_policy_loss_fix,
)

DPO_PAIR_FIX = Piece(
    patch="0002-algorithm-fix-dpo-compute-one-logit-per-chosen",
    summary="DPO computes one logit per chosen/rejected pair",
    targets=(_DPO,),
    install=install_dpo_pair_fix,
    upstream_has_fix=upstream_has_dpo_pair_fix,
)

TERM_WEIGHTS_FIX = Piece(
    patch="0003-trainer-weight-each-trinitypolicyloss-term-its-own",
    summary="each policy loss declares its aggregation; TrinityPolicyLoss weights each term by its own",
    targets=(_POLICY_LOSS_FN, _REC, _MIX, _MIX_CHORD, _DPO, _TRINITY_POLICY_LOSS),
    install=install_term_weights_fix,
    upstream_has_fix=upstream_has_term_weights_fix,
    requires=(POLICY_LOSS_FIX.patch,),
    loads=(REC_LOSS, MIX_LOSS, CHORD_LOSS, DPO_LOSS),  # the registry imports each loss only when it is asked for
)

DPO_GROUPING_FIX = Piece(
    patch="0004-trainer-keep-dpo-pairs-one-micro-batch-under-verl",
    summary="PolicyLossFn.group_size (DPO: 2), passed by VERLTrainer._update_actor as force_group_size",
    targets=(_POLICY_LOSS_FN, _DPO, _VERL_TRAINER),
    install=install_dpo_grouping_fix,
    upstream_has_fix=upstream_has_dpo_grouping_fix,
    loads=(DPO_LOSS,),
)

MIX_WARNING = Piece(
    patch="0005-trainer-warn-start-up-that-mix-mix-chord-depend",
    summary="TrinityPolicyLoss warns at start-up that MIX and MIX_CHORD depend on the micro-batch split",
    targets=(_TRINITY_POLICY_LOSS,),
    install=install_mix_warning,
    upstream_has_fix=upstream_has_mix_warning,
    requires=(TERM_WEIGHTS_FIX.patch,),
)

OVERLAY = Overlay(
    name="trinity_overlay",
    upstream="trinity",
    distribution="trinity-rft",
    supported=("0.6.0",),
    fixed_since=None,
    pieces=(POLICY_LOSS_FIX, DPO_PAIR_FIX, TERM_WEIGHTS_FIX, DPO_GROUPING_FIX, MIX_WARNING),
)


def activate() -> bool:
    """Switch the Trinity overlay on in this process; False if it already was (nothing is done twice)."""
    from patchset_overlay.runtime import activate as _activate

    return _activate(OVERLAY)


def deactivate() -> bool:
    """Undo the Trinity overlay in this process; False if it was not on."""
    from patchset_overlay.runtime import deactivate as _deactivate

    return _deactivate(OVERLAY)
