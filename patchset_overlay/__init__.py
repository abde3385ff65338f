"""Run the patchset's fixes on pip-installed upstream releases, without editing site-packages.

The overlay packages hold the patched code, module for module; this package switches them on (explicitly with
`activate_all`, or in every process through the ``patchset_overlay.pth`` file the install puts in site-packages),
guards them, and reports what is active (``python -m patchset_overlay status``). It names no overlay: it is the
lower layer, and each overlay imports it; the overlays are found through one registration list
(`patchset_overlay.startup`).

This module is the package's front: it only names what users call, and no module of the package imports it, so no
import runs back up (``tests/scripts/test_layers.py``). Its layers, bottom first: `startup` (the registration list,
the switch, what the start-up did) and `finder`; `spec`, `state`, `source`, `replace`; `guard`, `fingerprints`;
`runtime` (activation and undo); `status`, `autoload` (the ``.pth`` file's start-up) and ``__main__``. It runs at
every interpreter start, so it imports only `startup`; the machinery is imported when one of the watched modules is.
"""

from __future__ import annotations

import sys

from patchset_overlay.startup import ENV_SWITCH, overlays, switched_off, watched_modules

TYPE_CHECKING = False  # typing itself costs ~15 ms at start-up
if TYPE_CHECKING:
    from collections.abc import Callable

    from patchset_overlay.spec import Overlay

__all__ = ["ENV_SWITCH", "activate_all", "overlay_functions", "overlays", "switched_off", "watched_modules"]


def activate_all(how: str = "explicit") -> None:
    """Switch every overlay on in this process (idempotent); usable as Ray's ``worker_process_setup_hook``."""
    from patchset_overlay.runtime import activate_all as activate_every_overlay

    activate_every_overlay(how)


def overlay_functions(spec_module: str) -> tuple[Callable[[], Overlay], Callable[[], bool], Callable[[], bool]]:
    """An overlay package's ``overlay``, ``activate`` and ``deactivate``, its spec read from ``spec_module``'s
    ``OVERLAY`` when first asked for: each overlay package names these at its top level, at every interpreter start,
    so they import nothing until called."""

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
