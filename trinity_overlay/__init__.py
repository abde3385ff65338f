"""Overlay of the Trinity-RFT policy-loss fixes (patches/trinity/) for a pip-installed trinity-rft 0.6.0.

Modules here mirror Trinity's module paths and hold the patched symbols as the finished series leaves them;
`trinity_overlay.pieces` groups the patches into pieces by the symbols they change together. `activate` /
`deactivate` switch it in this process; installing this project switches it on in every process (see
`patchset_overlay`). Importing this package imports no Trinity code.
"""

from __future__ import annotations


def activate() -> bool:
    """Switch the Trinity overlay on in this process; False if it already was (nothing is done twice)."""
    from patchset_overlay.runtime import activate as _activate
    from trinity_overlay.pieces import OVERLAY

    return _activate(OVERLAY)


def deactivate() -> bool:
    """Undo the Trinity overlay in this process; False if it was not on."""
    from patchset_overlay.runtime import deactivate as _deactivate
    from trinity_overlay.pieces import OVERLAY

    return _deactivate(OVERLAY)
