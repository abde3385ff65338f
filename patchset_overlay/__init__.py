"""Run the patchset's fixes on pip-installed upstream releases, without editing site-packages.

The front of the overlay core: what users call, and what ``patchset_overlay.pth`` calls at every interpreter start
(`autoload`). It names no overlay (they are found through `patchset_overlay.startup`), and no module of the package
imports it. At start-up it imports only `startup`; the machinery waits for a watched import.
"""

from __future__ import annotations

import sys

from patchset_overlay.startup import AUTOMATIC, ENV_SWITCH, overlays, start, switched_off, watched_modules

TYPE_CHECKING = False  # typing itself costs ~15 ms at start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from patchset_overlay.spec import Overlay

__all__ = ["ENV_SWITCH", "activate_all", "autoload", "overlay_functions", "overlays", "switched_off", "watched_modules"]


def activate_all(how: str = "explicit") -> None:
    """Switch every overlay on in this process (idempotent); usable as Ray's ``worker_process_setup_hook``."""
    from patchset_overlay.runtime import activate_all as activate_every_overlay

    activate_every_overlay(how)


def overlay_functions(spec_module: str) -> tuple[Callable[[], Overlay], Callable[[], bool], Callable[[], bool]]:
    """An overlay package's ``overlay``, ``activate`` and ``deactivate``: read at every interpreter start, they import
    nothing (``spec_module``'s ``OVERLAY`` included) until called."""

    def overlay() -> Overlay:
        """This overlay's spec: its pieces, in order (imports no upstream code)."""
        __import__(spec_module)
        return sys.modules[spec_module].OVERLAY

    def activate() -> bool:
        """Switch this overlay on in this process; False if it already was (nothing is done twice)."""
        from patchset_overlay.runtime import activate as switch_on

        return switch_on(overlay())

    def deactivate() -> bool:
        """Undo this overlay in this process; False if it was not on."""
        from patchset_overlay.runtime import deactivate as switch_off

        return switch_off(overlay())

    return overlay, activate, deactivate


def autoload() -> None:
    """Called by ``patchset_overlay.pth`` at interpreter start: a failure is reported, never stops the interpreter."""
    try:
        start(_first_use)
    except Exception as error:  # never break interpreter start-up
        print(f"warning: patchset_overlay could not switch the overlays on: {error!r}", file=sys.stderr)


def _first_use(module: ModuleType) -> None:
    """The first watched module was imported: activate the overlays (their finder then calls the runtime)."""
    from patchset_overlay.runtime import dispatch

    activate_all(AUTOMATIC)
    dispatch(module)
