"""Overlay of the Trinity-RFT policy-loss fix (patches/trinity/) for a pip-installed trinity-rft 0.6.0.

Modules here mirror Trinity's module paths and hold only the patched symbols; each patch of the series is one
`Piece` of `OVERLAY`, in series order (a test checks that every patch has its piece). `activate` / `deactivate`
switch it in this process; installing this project switches it on in every process (see `patchset_overlay`).
"""

from __future__ import annotations

from patchset_overlay.spec import Overlay, Piece, Target
from trinity_overlay._policy_loss_fix import UPSTREAM_MODULE, install_policy_loss_fix, upstream_has_policy_loss_fix

POLICY_LOSS_FIX = Piece(
    patch="0001-trainer-policy-loss-global-normalization",
    summary="TrinityPolicyLoss weighted by its share of the global mini-batch",
    targets=(
        Target(
            UPSTREAM_MODULE, "TrinityPolicyLoss", "559d189e547c62a280a96b396469b68bc4b7f1225626dca4f07861fe9f662965"
        ),
    ),
    install=install_policy_loss_fix,
    upstream_has_fix=upstream_has_policy_loss_fix,
)

OVERLAY = Overlay(
    name="trinity_overlay",
    upstream="trinity",
    distribution="trinity-rft",
    supported=("0.6.0",),
    fixed_since=None,
    pieces=(POLICY_LOSS_FIX,),
)


def activate() -> bool:
    """Switch the Trinity overlay on in this process; False if it already was (nothing is done twice)."""
    from patchset_overlay.runtime import activate as _activate

    return _activate(OVERLAY)


def deactivate() -> bool:
    """Undo the Trinity overlay in this process; False if it was not on."""
    from patchset_overlay.runtime import deactivate as _deactivate

    return _deactivate(OVERLAY)
