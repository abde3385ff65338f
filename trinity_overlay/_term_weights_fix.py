"""How piece 0003 (each TrinityPolicyLoss term weighted by its own aggregation) goes onto Trinity.

It declares `loss_aggregation` on `PolicyLossFn` and on the losses that aggregate otherwise (REC, MIX, MIX_CHORD,
DPO), and gives `TrinityPolicyLoss` the patched `__init__`, `__call__` and `_micro_batch_weight`, over piece 0001's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType

from trinity_overlay._modules import CHORD_LOSS, DPO_LOSS, LOSSES, MIX_LOSS, POLICY_LOSS_FN, REC_LOSS

PATCHED_MEMBERS = ("__call__", "_micro_batch_weight")
DECLARING_LOSSES = (
    (REC_LOSS, "RECPolicyLossFn"),
    (MIX_LOSS, "MIXPolicyLossFn"),
    (CHORD_LOSS, "MIXCHORDPolicyLossFn"),
    (DPO_LOSS, "DPOLossFn"),
)


def upstream_has_term_weights_fix(modules: Mapping[str, ModuleType]) -> str | None:
    """Trinity's PolicyLossFn already declares how a loss aggregates."""
    if "loss_aggregation" in vars(modules[POLICY_LOSS_FN].PolicyLossFn):
        return "already weights each policy-loss term by its own aggregation (PolicyLossFn.loss_aggregation exists)"
    return None


def install_term_weights_fix(modules: Mapping[str, ModuleType], undo: list[Callable[[], None]]) -> None:
    """Declare each loss's aggregation, then give TrinityPolicyLoss the per-term weights and the patched
    `__init__` (run in Trinity's module, which gets ``get_logger`` and ``partial`` as the patch imports them)."""
    from functools import partial

    from trinity.utils.log import get_logger

    from patchset_overlay.replace import add_module_globals, replace_function_code, set_class_attributes
    from trinity_overlay.algorithm.policy_loss_fn import (
        chord_policy_loss,
        dpo_loss,
        mix_policy_loss,
        policy_loss_fn,
        rec_policy_loss,
    )
    from trinity_overlay.trainer.verl import losses

    mirrors = {
        REC_LOSS: rec_policy_loss,
        MIX_LOSS: mix_policy_loss,
        CHORD_LOSS: chord_policy_loss,
        DPO_LOSS: dpo_loss,
        POLICY_LOSS_FN: policy_loss_fn,
    }
    for module, name in ((POLICY_LOSS_FN, "PolicyLossFn"), *DECLARING_LOSSES):
        declared = vars(getattr(mirrors[module], name))["loss_aggregation"]
        undo.append(set_class_attributes(getattr(modules[module], name), {"loss_aggregation": declared}))
    upstream = modules[LOSSES]
    undo.append(add_module_globals(upstream, {"get_logger": get_logger, "partial": partial}))
    members = {name: vars(losses.TrinityPolicyLossTermWeights)[name] for name in PATCHED_MEMBERS}
    undo.append(set_class_attributes(upstream.TrinityPolicyLoss, members))
    undo.append(
        replace_function_code(
            vars(upstream.TrinityPolicyLoss)["__init__"], vars(losses.TrinityPolicyLossTermWeights)["__init__"]
        )
    )
