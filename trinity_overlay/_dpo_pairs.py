"""How the DPO-pairs piece (patches 0002, 0004) goes onto each of Trinity's modules.

Each installer is safe on its own: `group_size` is a new attribute that only the patched `_update_actor` reads,
through Trinity's registry, whose base class module Trinity's trainer imports (and so this overlay changes) first.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from patchset_overlay.source import UpstreamSource
from trinity_overlay._modules import DPO_LOSS, POLICY_LOSS_FN


def upstream_has_dpo_pair_fix(source: UpstreamSource) -> str | None:
    """Trinity's DPO already sums each response on its own and says its rows come in pairs."""
    if "axis=-1" in source.segment(DPO_LOSS, "DPOLossFn") and "group_size" in source.segment(
        POLICY_LOSS_FN, "PolicyLossFn"
    ):
        return "already has the DPO pair fix (DPOLossFn sums each response with axis=-1; PolicyLossFn.group_size)"
    return None


def install_group_size(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    from patchset_overlay.replace import set_class_attributes
    from trinity_overlay.algorithm.policy_loss_fn import policy_loss_fn

    undo.append(set_class_attributes(module.PolicyLossFn, {"group_size": policy_loss_fn.PolicyLossFn.group_size}))


def install_dpo_loss(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """`group_size` 2 on DPOLossFn, and the patched code for the `__call__` Trinity's PolicyLossFnMeta wraps (the
    wrapper stays as it is)."""
    from patchset_overlay.replace import decorated_function, replace_function_code, set_class_attributes
    from trinity_overlay.algorithm.policy_loss_fn import dpo_loss

    mirror = dpo_loss.DPOLossFn
    undo.append(set_class_attributes(module.DPOLossFn, {"group_size": mirror.group_size}))
    wrapped = decorated_function(vars(module.DPOLossFn)["__call__"])
    undo.append(replace_function_code(wrapped, vars(mirror)["__call__"]))


def install_update_actor(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    from patchset_overlay.replace import add_module_globals, replace_function_code
    from trinity_overlay.trainer.verl import trainer

    undo.append(add_module_globals(module, trainer.ADDED_GLOBALS))
    upstream, mirror = vars(module.VERLTrainer)["_update_actor"], vars(trainer.VERLTrainer)["_update_actor"]
    undo.append(replace_function_code(upstream, mirror))
