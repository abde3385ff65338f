"""Imported at interpreter start-up by ``patchset_overlay.pth``: switch the overlays on unless told not to.

At start-up this only puts an import finder on ``sys.meta_path`` for the modules the overlays change. The
overlays are activated, and judged, when the first of those modules has been imported, so a process that never
touches verl or Trinity pays for two small modules and a set lookup per import. A failure is reported and never
stops the interpreter.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

AUTOMATIC = "automatic (patchset_overlay.pth)"
# what the start-up did in this process, for `status`: AUTOMATIC, or why the overlays stay off
outcome = ""


def autoload() -> None:
    global outcome
    from patchset_overlay import ENV_SWITCH, switched_off, watched_modules

    if switched_off():
        outcome = f"switched off by {ENV_SWITCH}={os.environ[ENV_SWITCH]}"
        return
    from patchset_overlay.finder import install

    install(watched_modules(), _first_use)
    outcome = AUTOMATIC


def _first_use(module: ModuleType) -> None:
    """The first watched module was imported: activate the overlays (their finder then calls the runtime)."""
    from patchset_overlay import activate_all, dispatch

    activate_all(AUTOMATIC)
    dispatch(module)


try:
    autoload()
except Exception as error:  # never break interpreter start-up
    print(f"warning: patchset_overlay could not switch the overlays on: {error!r}", file=sys.stderr)
