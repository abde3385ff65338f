"""Run the patchset's fixes on pip-installed verl / Trinity-RFT releases, without editing site-packages.

`verl_overlay` and `trinity_overlay` hold the patched code, module for module; this package switches them on
(explicitly with `activate_all`, or in every process through the ``patchset_overlay.pth`` file the install puts
in site-packages), guards them, and reports what is active (``python -m patchset_overlay status``).
"""

from __future__ import annotations

import os

from patchset_overlay.spec import Overlay

ENV_SWITCH = "PATCHSET_OVERLAYS"
_OFF_VALUES = ("0", "off", "false", "no")


def overlays() -> tuple[Overlay, ...]:
    """Every overlay this project ships (their specs import no upstream code)."""
    from trinity_overlay import OVERLAY as TRINITY
    from verl_overlay import OVERLAY as VERL

    return (VERL, TRINITY)


def switched_off(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """Whether ``PATCHSET_OVERLAYS`` turns automatic activation off (0, off, false, no)."""
    return environ.get(ENV_SWITCH, "").strip().lower() in _OFF_VALUES


def activate_all() -> None:
    """Switch every overlay on in this process (idempotent); usable as Ray's ``worker_process_setup_hook``."""
    from patchset_overlay.runtime import activate

    for overlay in overlays():
        activate(overlay)


def deactivate_all() -> None:
    """Undo every overlay in this process."""
    from patchset_overlay.runtime import deactivate

    for overlay in overlays():
        deactivate(overlay)
