"""Piece 0003, the GMPO policy loss normalized by the global mini-batch: its target, how to tell a tree has it (its
``compute_policy_loss_geo_mean`` reads ``global_batch_info``), and its installer. verl 0.8.0, 0.9.0 and 0.9.1 all
lack it, so the piece has no ``fixed_since``. The patched code is in the mirrored
``verl_overlay/trainer/ppo/core_algos.py``; it goes onto ``compute_policy_loss_geo_mean`` in place, and
``POLICY_LOSS_REGISTRY`` holds that very function object, so ``get_policy_loss_fn("geo_mean")`` (ppo_loss, the
distillation branch) returns it."""

from __future__ import annotations

from patchset_overlay.spec import Piece, Target, code_from, source_has

CORE_ALGOS = "verl.trainer.ppo.core_algos"
GEO_MEAN = "compute_policy_loss_geo_mean"

PIECE = Piece(
    name="0003-algo-normalize-geo-mean-policy-loss-global-mini",
    patches=("0003-algo-normalize-geo-mean-policy-loss-global-mini",),
    targets=(Target(CORE_ALGOS, GEO_MEAN),),
    installers={CORE_ALGOS: code_from("verl_overlay.trainer.ppo.core_algos", GEO_MEAN)},
    upstream_has_fix=source_has(
        CORE_ALGOS,
        GEO_MEAN,
        "global_batch_info",
        "already has the geo_mean fix (compute_policy_loss_geo_mean aggregates with global_batch_info)",
    ),
)
