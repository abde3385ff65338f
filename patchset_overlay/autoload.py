"""Imported at interpreter start-up by ``patchset_overlay.pth``: switch the overlays on unless told not to.

At start-up this only puts an import finder on ``sys.meta_path`` for the modules the overlays change
(`patchset_overlay.startup.start`). The overlays are activated, and judged, when the first of those modules has been
imported, so a process that never touches verl or Trinity pays for a few small modules and a set lookup per import.
A failure is reported and never stops the interpreter. The top of the overlay core: nothing imports this module
(importing it is the start-up); what it did is `patchset_overlay.startup.outcome`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType


def _first_use(module: ModuleType) -> None:
    """The first watched module was imported: activate the overlays (their finder then calls the runtime)."""
    from patchset_overlay.runtime import activate_all, dispatch
    from patchset_overlay.startup import AUTOMATIC

    activate_all(AUTOMATIC)
    dispatch(module)


try:
    from patchset_overlay.startup import start

    start(_first_use)
except Exception as error:  # never break interpreter start-up
    print(f"warning: patchset_overlay could not switch the overlays on: {error!r}", file=sys.stderr)
