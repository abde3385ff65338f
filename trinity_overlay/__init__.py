"""Overlay of the Trinity-RFT policy-loss fixes (patches/trinity/) for a pip-installed trinity-rft 0.6.0.

Modules here mirror Trinity's module paths and hold the patched symbols as the finished series leaves them;
`trinity_overlay.pieces` holds one file per piece (patches grouped by the symbols they change together). `activate` /
`deactivate` switch it in this process; installing this project switches it on in every process (see
`patchset_overlay`, which finds this package through ``patchset_overlay_registry``). Importing this package imports
no Trinity code, nor anything else: it is read at every interpreter start.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from patchset_overlay.spec import Overlay

# Trinity's modules the pieces change: the start-up import finder watches them (tests/overlay pins that they are the
# pieces' target modules)
WATCHED = (
    "trinity.algorithm.policy_loss_fn.policy_loss_fn",
    "trinity.algorithm.policy_loss_fn.dpo_loss",
    "trinity.algorithm.policy_loss_fn.rec_policy_loss",
    "trinity.algorithm.policy_loss_fn.mix_policy_loss",
    "trinity.algorithm.policy_loss_fn.chord_policy_loss",
    "trinity.trainer.verl.losses",
    "trinity.trainer.verl.trainer",
    "trinity.algorithm.algorithm",
    "trinity.common.config_validator",
)


def overlay() -> Overlay:
    """This overlay's spec: its pieces, in order (imports no Trinity code)."""
    from trinity_overlay.pieces import OVERLAY

    return OVERLAY


def activate() -> bool:
    """Switch the Trinity overlay on in this process; False if it already was (nothing is done twice)."""
    from patchset_overlay.runtime import activate as _activate

    return _activate(overlay())


def deactivate() -> bool:
    """Undo the Trinity overlay in this process; False if it was not on."""
    from patchset_overlay.runtime import deactivate as _deactivate

    return _deactivate(overlay())
