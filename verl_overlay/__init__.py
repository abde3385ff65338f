"""Overlay of the verl critic fix (patches/verl/) for a pip-installed verl 0.8.0.

Modules here mirror verl's module paths and hold only the patched symbols. `activate` switches the overlay on in
this process (a second call does nothing), `deactivate` undoes it; installing this project does it in every
process automatically (see `patchset_overlay`). verl >= 0.9.0 has the fix, and the overlay stays off there.
"""

from __future__ import annotations

from patchset_overlay.spec import Overlay, Piece, Target
from verl_overlay._critic_fix import install_critic_fix, upstream_has_critic_fix

CRITIC_FIX = Piece(
    patch="0001-trainer-critic-value-loss-global-normalization",
    summary="critic value_loss normalized by the global mini-batch; CriticConfig.loss_scale_factor",
    targets=(
        Target(
            "verl.trainer.ppo.core_algos",
            "compute_value_loss",
            "14d8f670eec89eda9d9f1143f72a6851fbea4bcec725618bb6c1387ca2638560",
        ),
        Target(
            "verl.workers.config.critic",
            "CriticConfig",
            "b5d7798ed315a5ab80d15b68475e793039c1c681eff9dd15844f6734223ec18e",
        ),
        Target(
            "verl.workers.utils.losses",
            "value_loss",
            "ef58fd797f74c0d1de287ac278ea2ed1abd29fd5b2ea33f68360e30d7ca782a8",
        ),
    ),
    install=install_critic_fix,
    upstream_has_fix=upstream_has_critic_fix,
)

OVERLAY = Overlay(
    name="verl_overlay",
    upstream="verl",
    distribution="verl",
    supported=("0.8.0",),
    fixed_since="0.9.0",
    pieces=(CRITIC_FIX,),
)


def activate() -> bool:
    """Switch the verl overlay on in this process; False if it already was (nothing is done twice)."""
    from patchset_overlay.runtime import activate as _activate

    return _activate(OVERLAY)


def deactivate() -> bool:
    """Undo the verl overlay in this process; False if it was not on."""
    from patchset_overlay.runtime import deactivate as _deactivate

    return _deactivate(OVERLAY)
