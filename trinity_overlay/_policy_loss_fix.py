"""How piece 0001 (TrinityPolicyLoss global normalization) goes onto Trinity, and how to tell it is there."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType

from trinity_overlay._modules import LOSSES

PATCHED_MEMBERS = ("__call__", "_micro_batch_weight")


def upstream_has_policy_loss_fix(modules: Mapping[str, ModuleType]) -> str | None:
    """Trinity's TrinityPolicyLoss already weights micro-batches (a patched checkout, or a later release)."""
    if hasattr(modules[LOSSES].TrinityPolicyLoss, "_micro_batch_weight"):
        return "already has the policy-loss fix (TrinityPolicyLoss._micro_batch_weight exists)"
    return None


def install_policy_loss_fix(modules: Mapping[str, ModuleType], undo: list[Callable[[], None]]) -> None:
    """Set the patched `__call__` and the new `_micro_batch_weight` on the upstream class."""
    from patchset_overlay.replace import set_class_attributes
    from trinity_overlay.trainer.verl import losses

    members = {name: vars(losses.TrinityPolicyLoss)[name] for name in PATCHED_MEMBERS}
    undo.append(set_class_attributes(modules[LOSSES].TrinityPolicyLoss, members))
