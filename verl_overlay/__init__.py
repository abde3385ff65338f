"""Overlay of the verl fixes (patches/verl/) for a pip-installed verl 0.8.0 or 0.9.1.

Modules here mirror verl's module paths and hold only the patched symbols; `verl_overlay.pieces` declares what
goes where. `activate` switches the overlay on in this process (a second call does nothing), `deactivate` undoes
it; installing this project does it in every process automatically (see `patchset_overlay`). verl >= 0.9.0 has
the critic and distillation fixes, and those pieces stay off there; the geo_mean piece goes onto 0.8.0 and 0.9.1.
Importing this package imports no verl code.
"""

from __future__ import annotations


def activate() -> bool:
    """Switch the verl overlay on in this process; False if it already was (nothing is done twice)."""
    from patchset_overlay.runtime import activate as _activate
    from verl_overlay.pieces import OVERLAY

    return _activate(OVERLAY)


def deactivate() -> bool:
    """Undo the verl overlay in this process; False if it was not on."""
    from patchset_overlay.runtime import deactivate as _deactivate
    from verl_overlay.pieces import OVERLAY

    return _deactivate(OVERLAY)
