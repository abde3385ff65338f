"""How piece 0004 (DPO pairs kept in one micro-batch) goes onto Trinity, and how to tell it is there."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType

from trinity_overlay._modules import DPO_LOSS, POLICY_LOSS_FN, TRAINER


def upstream_has_dpo_grouping_fix(modules: Mapping[str, ModuleType]) -> str | None:
    """Trinity's PolicyLossFn already says how many consecutive rows a loss compares."""
    if "group_size" in vars(modules[POLICY_LOSS_FN].PolicyLossFn):
        return "already keeps DPO pairs in one micro-batch (PolicyLossFn.group_size exists)"
    return None


def install_dpo_grouping_fix(modules: Mapping[str, ModuleType], undo: list[Callable[[], None]]) -> None:
    """Add `group_size` (1, DPO 2), then give `VERLTrainer._update_actor` the code that passes it to the engine."""
    from patchset_overlay.replace import add_module_globals, replace_function_code, set_class_attributes
    from trinity_overlay.algorithm.policy_loss_fn import dpo_loss, policy_loss_fn
    from trinity_overlay.trainer.verl import trainer

    base, dpo = policy_loss_fn.PolicyLossFn, dpo_loss.DPOLossFn
    undo.append(set_class_attributes(modules[POLICY_LOSS_FN].PolicyLossFn, {"group_size": base.group_size}))
    undo.append(set_class_attributes(modules[DPO_LOSS].DPOLossFn, {"group_size": dpo.group_size}))
    upstream = modules[TRAINER]
    undo.append(add_module_globals(upstream, trainer.ADDED_GLOBALS))
    undo.append(
        replace_function_code(vars(upstream.VERLTrainer)["_update_actor"], vars(trainer.VERLTrainer)["_update_actor"])
    )
