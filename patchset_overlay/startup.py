"""What interpreter start-up reads and records: the registered overlays, the switch that keeps them off, and what
the start-up did in this process.

**Registration.** The overlays are the packages that the one registration list outside this package,
``patchset_overlay_registry.OVERLAYS``, names, in the order ``status`` lists them. Each such package declares at its
top level ``WATCHED`` (the upstream modules it changes, for the start-up finder) and ``overlay()`` (its spec,
`patchset_overlay.spec.Overlay`, made by `patchset_overlay.overlay_functions`), and imports nothing at module level
but that front of the core, which the start-up has imported already. Why a list module rather than entry points
(as OpenTelemetry's instrumentors are found): the list is read at every interpreter start, where one small module
costs well under a millisecond, while ``importlib.metadata`` costs ~50 ms to import and ~7 ms to scan the
distributions of a training environment (measured in the overlay test venv); and a module is found wherever the
packages are, also where no ``.dist-info`` is (a checkout on ``PYTHONPATH``, packages shipped to Ray workers with
``py_modules``), which entry points are not.

The bottom of the overlay core: every other module of it may import this one, and it imports none of them but the
finder, which imports nothing. It runs at every interpreter start (``patchset_overlay.autoload``), so it imports
nothing but ``os``, ``sys`` and the registered packages' lists of module names.
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
