"""Piece 0003, the GMPO policy loss normalized by the global mini-batch: its target, how to tell a tree has it (its
``compute_policy_loss_geo_mean`` reads ``global_batch_info``), and its installer. verl 0.8.0, 0.9.0 and 0.9.1 all
lack it, so the piece has no ``fixed_since``. The patched code is in the mirrored
``verl_overlay/trainer/ppo/core_algos.py``."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from patchset_overlay.source import UpstreamSource
from patchset_overlay.spec import Piece, Target

CORE_ALGOS = "verl.trainer.ppo.core_algos"


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


PIECE = Piece(
    name="0003-algo-normalize-geo-mean-policy-loss-global-mini",
    patches=("0003-algo-normalize-geo-mean-policy-loss-global-mini",),
    targets=(Target(CORE_ALGOS, "compute_policy_loss_geo_mean"),),
    installers={CORE_ALGOS: install_geo_mean},
    upstream_has_fix=upstream_has_geo_mean_fix,
)
