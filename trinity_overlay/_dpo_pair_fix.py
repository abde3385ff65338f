"""How piece 0002 (one DPO logit per chosen/rejected pair) goes onto Trinity, and how to tell it is there."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from types import ModuleType

from trinity_overlay._modules import DPO_LOSS


def _wrapped_call(modules: Mapping[str, ModuleType]):  # type: ignore[no-untyped-def]
    """The `DPOLossFn.__call__` that Trinity's PolicyLossFnMeta wrapped (the class attribute is the wrapper)."""
    from patchset_overlay.replace import decorated_function

    return decorated_function(vars(modules[DPO_LOSS].DPOLossFn)["__call__"])


def upstream_has_dpo_pair_fix(modules: Mapping[str, ModuleType]) -> str | None:
    """Trinity's DPO already sums each response on its own (``masked_sum(..., axis=-1)``)."""
    if "axis=-1" in inspect.getsource(_wrapped_call(modules)):
        return "already has the DPO per-pair fix (DPOLossFn sums each response with masked_sum(..., axis=-1))"
    return None


def install_dpo_pair_fix(modules: Mapping[str, ModuleType], undo: list[Callable[[], None]]) -> None:
    """Give the wrapped `DPOLossFn.__call__` the patched code; the metaclass's wrapper stays as it is."""
    from patchset_overlay.replace import replace_function_code
    from trinity_overlay.algorithm.policy_loss_fn import dpo_loss

    undo.append(replace_function_code(_wrapped_call(modules), vars(dpo_loss.DPOLossFn)["__call__"]))
