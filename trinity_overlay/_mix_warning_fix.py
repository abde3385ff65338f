"""How piece 0005 (start-up warning for MIX and MIX_CHORD) goes onto Trinity, and how to tell it is there."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from types import ModuleType

from trinity_overlay._modules import LOSSES


def upstream_has_mix_warning(modules: Mapping[str, ModuleType]) -> str | None:
    """Trinity's TrinityPolicyLoss already warns about losses that weight their micro-batches themselves."""
    if "micro-batch-weighted" in inspect.getsource(vars(modules[LOSSES].TrinityPolicyLoss)["__init__"]):
        return "already warns about MIX and MIX_CHORD (TrinityPolicyLoss.__init__ checks micro-batch-weighted)"
    return None


def install_mix_warning(modules: Mapping[str, ModuleType], undo: list[Callable[[], None]]) -> None:
    """Give `TrinityPolicyLoss.__init__` the code that also warns (over piece 0003's, which added its logger)."""
    from patchset_overlay.replace import replace_function_code
    from trinity_overlay.trainer.verl import losses

    init = vars(modules[LOSSES].TrinityPolicyLoss)["__init__"]
    undo.append(replace_function_code(init, vars(losses.TrinityPolicyLossMixWarning)["__init__"]))
