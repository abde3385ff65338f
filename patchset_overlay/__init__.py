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

from patchset_overlay.startup import ENV_SWITCH, overlays, switched_off, watched_modules

__all__ = ["ENV_SWITCH", "activate_all", "overlays", "switched_off", "watched_modules"]


def activate_all(how: str = "explicit") -> None:
    """Switch every overlay on in this process (idempotent); usable as Ray's ``worker_process_setup_hook``."""
    from patchset_overlay.runtime import activate_all as activate_every_overlay

    activate_every_overlay(how)
