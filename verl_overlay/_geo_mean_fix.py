"""How piece 0003 (the GMPO policy loss normalized by the global mini-batch) goes onto verl, and how to tell that
verl already has it (its ``compute_policy_loss_geo_mean`` reads ``global_batch_info``). verl 0.8.0, 0.9.0 and 0.9.1
all lack it, so the piece has no ``fixed_since``."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from patchset_overlay.source import UpstreamSource
from verl_overlay._modules import CORE_ALGOS


def upstream_has_geo_mean_fix(source: UpstreamSource) -> str | None:
    if "global_batch_info" in source.segment(CORE_ALGOS, "compute_policy_loss_geo_mean"):
        return "already has the geo_mean fix (compute_policy_loss_geo_mean aggregates with global_batch_info)"
    return None


def install_geo_mean(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """Give ``compute_policy_loss_geo_mean`` the patched code in place: ``POLICY_LOSS_REGISTRY`` holds that very
    function object, so ``get_policy_loss_fn("geo_mean")`` (ppo_loss, the distillation branch) returns it."""
    from patchset_overlay.replace import replace_function_code
    from verl_overlay.trainer.ppo import core_algos

    undo.append(replace_function_code(module.compute_policy_loss_geo_mean, core_algos.compute_policy_loss_geo_mean))
