"""Pieces 0004 and 0005 on verl 0.9.1: `verl_overlay.pieces.mini_batch_statistics` (0.8.0) with 0.9.1's
``TrainingWorker.train_mini_batch`` and ``ActorRolloutRefWorker.init_model`` (``verl_overlay/workers/
engine_workers_v0_9.py``), the two patched methods whose code differs between the releases; every other installer is
the 0.8.0 piece's. verl 0.9.1 lacks both fixes (upstream's #7830 is open), so the piece has no ``fixed_since``.
"""

from __future__ import annotations

from dataclasses import replace

from verl_overlay.pieces.mini_batch_statistics import ENGINE_WORKERS, engine_workers_installer
from verl_overlay.pieces.mini_batch_statistics import PIECE as PIECE_0_8

PIECE = replace(
    PIECE_0_8,
    name="mini-batch-statistics-v0.9",
    installers={**PIECE_0_8.installers, ENGINE_WORKERS: engine_workers_installer("engine_workers_v0_9")},
    releases=("0.9.1",),
)
