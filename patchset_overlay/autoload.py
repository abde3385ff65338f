"""Imported at interpreter start-up by ``patchset_overlay.pth``: switch the overlays on unless told not to.

It only registers import hooks: no upstream module is imported here, so a process that never touches verl or
Trinity pays for importing wrapt and nothing else. A failure is reported and never stops the interpreter.
"""

from __future__ import annotations

import os
import sys


def autoload() -> None:
    from patchset_overlay import ENV_SWITCH, overlays, switched_off
    from patchset_overlay.runtime import activate
    from patchset_overlay.state import record_for

    if switched_off():
        for overlay in overlays():
            record_for(overlay.name).how = f"switched off by {ENV_SWITCH}={os.environ[ENV_SWITCH]}"
        return
    for overlay in overlays():
        activate(overlay, how="automatic (patchset_overlay.pth)")


try:
    autoload()
except Exception as error:  # never break interpreter start-up
    print(f"warning: patchset_overlay could not switch the overlays on: {error!r}", file=sys.stderr)
