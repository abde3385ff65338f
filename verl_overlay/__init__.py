"""Overlay of the verl fixes (patches/verl/) for a pip-installed verl 0.8.0 or 0.9.1.

Modules here mirror verl's module paths and hold only the patched symbols; `verl_overlay.pieces` holds one file per
piece, saying what goes where. `activate` switches the overlay on in this process (a second call does nothing),
`deactivate` undoes it; installing this project does it in every process automatically (see `patchset_overlay`,
which finds this package through ``patchset_overlay_registry``). verl >= 0.9.0 has the critic and distillation
fixes, and those pieces stay off there; the geo_mean piece goes onto 0.8.0 and 0.9.1. Importing this package imports
no verl code, nor anything else: it is read at every interpreter start.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from patchset_overlay.spec import Overlay

# verl's modules the pieces change: the start-up import finder watches them (tests/overlay pins that they are the
# pieces' target modules)
WATCHED = (
    "verl.trainer.ppo.core_algos",
    "verl.workers.config.critic",
    "verl.workers.utils.losses",
    "verl.trainer.distillation.losses",
)


def overlay() -> Overlay:
    """This overlay's spec: its pieces, in order (imports no verl code)."""
    from verl_overlay.pieces import OVERLAY

    return OVERLAY


def activate() -> bool:
    """Switch the verl overlay on in this process; False if it already was (nothing is done twice)."""
    from patchset_overlay.runtime import activate as _activate

    return _activate(overlay())


def deactivate() -> bool:
    """Undo the verl overlay in this process; False if it was not on."""
    from patchset_overlay.runtime import deactivate as _deactivate

    return _deactivate(overlay())
