"""What interpreter start-up reads and records: the registered overlays, the switch that keeps them off, and what
the start-up did in this process.

The overlays are the packages ``patchset_overlay_registry.OVERLAYS`` names: a list module rather than entry points,
as ``importlib.metadata`` costs ~50 ms at every interpreter start (measured), and a module is found also where no
``.dist-info`` is (a checkout, Ray's ``py_modules``). It imports nothing of the core but the finder.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing itself costs ~15 ms at start-up
if TYPE_CHECKING:
    from types import ModuleType

    from patchset_overlay.finder import Callback
    from patchset_overlay.spec import Overlay

ENV_SWITCH = "PATCHSET_OVERLAYS"
_OFF_VALUES = ("0", "off", "false", "no")
REGISTRY = "patchset_overlay_registry"  # the registration list's module (`OVERLAYS`: the overlay packages' names)
AUTOMATIC = "automatic (patchset_overlay.pth)"
# what the start-up did in this process, for `status`: AUTOMATIC, or why the overlays stay off ("" without a start-up)
outcome = ""


def _registered() -> list[ModuleType]:
    """The overlay packages the registration list names, imported (``__import__``: ``importlib`` costs at start)."""
    __import__(REGISTRY)
    packages = []
    for name in sys.modules[REGISTRY].OVERLAYS:
        __import__(name)
        packages.append(sys.modules[name])
    return packages


def overlays() -> tuple[Overlay, ...]:
    """Every registered overlay, in the registration list's order (their specs import no upstream code)."""
    return tuple(package.overlay() for package in _registered())


def watched_modules() -> tuple[str, ...]:
    """Every upstream module a registered overlay changes, without importing the overlays' machinery."""
    return tuple(module for package in _registered() for module in package.WATCHED)


def switched_off(environ: os._Environ[str] | dict[str, str] = os.environ) -> bool:
    """Whether ``PATCHSET_OVERLAYS`` turns automatic activation off (0, off, false, no)."""
    return environ.get(ENV_SWITCH, "").strip().lower() in _OFF_VALUES


def start(first_use: Callback) -> None:
    """Switch the overlays on in this process unless ``PATCHSET_OVERLAYS`` says not to: put an import finder on
    ``sys.meta_path`` for the modules they change, which calls ``first_use`` when the first of them is imported."""
    global outcome
    if switched_off():
        outcome = f"switched off by {ENV_SWITCH}={os.environ[ENV_SWITCH]}"
        return
    from patchset_overlay.finder import install

    install(watched_modules(), first_use)
    outcome = AUTOMATIC
