"""Overlay of the Trinity-RFT policy-loss fixes (patches/trinity/) for a pip-installed trinity-rft 0.6.0.

Modules here mirror Trinity's module paths and hold the patched symbols as the finished series leaves them;
`trinity_overlay.pieces` holds one file per piece (patches grouped by the symbols they change together). `activate` /
`deactivate` switch it in this process; installing this project switches it on in every process (see
`patchset_overlay`, which finds this package through ``patchset_overlay_registry``).
"""

from __future__ import annotations

from patchset_overlay import overlay_functions

WATCHED = (
    "trinity.algorithm.policy_loss_fn.policy_loss_fn",
    "trinity.algorithm.policy_loss_fn.dpo_loss",
    "trinity.algorithm.policy_loss_fn.rec_policy_loss",
    "trinity.algorithm.policy_loss_fn.mix_policy_loss",
    "trinity.algorithm.policy_loss_fn.chord_policy_loss",
    "trinity.trainer.verl.losses",
    "trinity.trainer.verl.trainer",
    "trinity.trainer.verl.workers",
    "trinity.common.config",
    "trinity.algorithm.algorithm",
    "trinity.common.config_validator",
)

# its spec (`trinity_overlay.pieces.OVERLAY`), and the switches users call (``trinity_overlay.activate()``)
overlay, activate, deactivate = overlay_functions("trinity_overlay.pieces")
