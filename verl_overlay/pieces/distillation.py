"""Piece 0002, the distillation loss reads its micro-batch's global batch info: its target, the release that has it
(verl >= 0.9.0 sets ``config.global_batch_info`` from ``data`` in ``distillation_loss``), how to tell a tree has it,
and its installer. The patched code is in the mirrored ``verl_overlay/trainer/distillation/losses.py``; it goes onto
``distillation_loss`` in place, and ``distillation_ppo_loss`` calls it by its module global, so every caller gets it.
Safe on its own: it reads only what the engine attaches to every micro-batch."""

from __future__ import annotations

import re

from patchset_overlay.spec import Piece, Target, code_from, source_has

DISTILLATION_LOSSES = "verl.trainer.distillation.losses"
_SETS_BATCH_INFO = re.compile(r"global_batch_info[\s\S]*?=\s*data\[\"batch_num_tokens\"\]")

PIECE = Piece(
    name="0002-algo-micro-batch-normalization-distillation-loss",
    patches=("0002-algo-micro-batch-normalization-distillation-loss",),
    targets=(Target(DISTILLATION_LOSSES, "distillation_loss"),),
    installers={DISTILLATION_LOSSES: code_from("verl_overlay.trainer.distillation.losses", "distillation_loss")},
    upstream_has_fix=source_has(
        DISTILLATION_LOSSES,
        "distillation_loss",
        _SETS_BATCH_INFO,
        "already has the distillation fix (distillation_loss sets global_batch_info from its micro-batch)",
    ),
    fixed_since="0.9.0",
    releases=("0.8.0", "0.9.1"),  # verl 0.7.1: no distillation there
)
