"""Run the patchset's fixes on pip-installed verl / Trinity-RFT releases, without editing site-packages.

`verl_overlay` and `trinity_overlay` hold the patched code, module for module; this package switches them on
(explicitly with `activate_all`, or in every process through the ``patchset_overlay.pth`` file the install puts
in site-packages), guards them, and reports what is active (``python -m patchset_overlay status``).

This module runs at every interpreter start: it imports nothing but ``os`` and the overlays' lists of module names;
the machinery is imported when one of those modules is.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing itself costs ~15 ms at start-up
if TYPE_CHECKING:
    from types import ModuleType

    from patchset_overlay.spec import Overlay

ENV_SWITCH = "PATCHSET_OVERLAYS"
_OFF_VALUES = ("0", "off", "false", "no")


def overlays() -> tuple[Overlay, ...]:
    """Every overlay this project ships (their specs import no upstream code)."""
    from trinity_overlay.pieces import OVERLAY as TRINITY
    from verl_overlay.pieces import OVERLAY as VERL

    return (VERL, TRINITY)


def watched_modules() -> tuple[str, ...]:
    """Every upstream module an overlay changes, without importing the overlays' machinery."""
    from trinity_overlay import WATCHED as TRINITY
    from verl_overlay import WATCHED as VERL

    return (*VERL, *TRINITY)


def switched_off(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """Whether ``PATCHSET_OVERLAYS`` turns automatic activation off (0, off, false, no)."""
    return environ.get(ENV_SWITCH, "").strip().lower() in _OFF_VALUES


def dispatch(module: ModuleType) -> None:
    """Called by the import finder when a watched module has finished importing; never breaks that import."""
    try:
        from patchset_overlay.runtime import on_module_executed

        on_module_executed(module)
    except Exception as error:
        import sys

        print(f"warning: patchset_overlay: {module.__name__} left as upstream has it: {error!r}", file=sys.stderr)


def activate_all(how: str = "explicit") -> None:
    """Switch every overlay on in this process (idempotent); usable as Ray's ``worker_process_setup_hook``."""
    from patchset_overlay.runtime import activate

    for overlay in overlays():
        activate(overlay, how)
