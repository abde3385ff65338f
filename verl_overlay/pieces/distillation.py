"""Piece 0002, the distillation loss reads its micro-batch's global batch info: its target, the release that has it
(verl >= 0.9.0 sets ``config.global_batch_info`` from ``data`` in ``distillation_loss``), how to tell a tree has it,
and its installer. The patched code is in the mirrored ``verl_overlay/trainer/distillation/losses.py``."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType

from patchset_overlay.source import UpstreamSource
from patchset_overlay.spec import Piece, Target

DISTILLATION_LOSSES = "verl.trainer.distillation.losses"
_SETS_BATCH_INFO = re.compile(r"global_batch_info[\s\S]*?=\s*data\[\"batch_num_tokens\"\]")


def upstream_has_distillation_fix(source: UpstreamSource) -> str | None:
    if _SETS_BATCH_INFO.search(source.segment(DISTILLATION_LOSSES, "distillation_loss")):
        return "already has the distillation fix (distillation_loss sets global_batch_info from its micro-batch)"
    return None


def install_distillation_loss(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """Give ``distillation_loss`` the patched code; ``distillation_ppo_loss`` calls it by its module global, so
    every caller gets it. Safe on its own: it reads only what the engine attaches to every micro-batch."""
    from patchset_overlay.replace import replace_function_code
    from verl_overlay.trainer.distillation import losses

    undo.append(replace_function_code(module.distillation_loss, losses.distillation_loss))


PIECE = Piece(
    name="0002-algo-micro-batch-normalization-distillation-loss",
    patches=("0002-algo-micro-batch-normalization-distillation-loss",),
    targets=(Target(DISTILLATION_LOSSES, "distillation_loss"),),
    installers={DISTILLATION_LOSSES: install_distillation_loss},
    upstream_has_fix=upstream_has_distillation_fix,
    fixed_since="0.9.0",
    releases=("0.8.0", "0.9.1"),  # verl 0.7.1: no distillation there
)
