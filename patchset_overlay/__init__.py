"""Run the patchset's fixes on pip-installed upstream releases, without editing site-packages.

The overlay packages hold the patched code, module for module; this package switches them on (explicitly with
`activate_all`, or in every process through the ``patchset_overlay.pth`` file the install puts in site-packages),
guards them, and reports what is active (``python -m patchset_overlay status``). It names no overlay: it is the
lower layer, and each overlay imports it.

**Registration.** The overlays are the packages that the one registration list outside this package,
``patchset_overlay_registry.OVERLAYS``, names, in the order ``status`` lists them. Each such package declares at its
top level ``WATCHED`` (the upstream modules it changes, for the start-up finder) and ``overlay()`` (its spec,
`patchset_overlay.spec.Overlay`), and imports nothing at module level. Why a list module rather than entry points
(as OpenTelemetry's instrumentors are found): the list is read at every interpreter start, where one small module
costs well under a millisecond, while ``importlib.metadata`` costs ~50 ms to import and ~7 ms to scan the
distributions of a training environment (measured in the overlay test venv); and a module is found wherever the
packages are, also where no ``.dist-info`` is (a checkout on ``PYTHONPATH``, packages shipped to Ray workers with
``py_modules``), which entry points are not.

This module runs at every interpreter start: it imports nothing but ``os``, ``sys`` and the registered packages'
lists of module names; the machinery is imported when one of those modules is.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing itself costs ~15 ms at start-up
if TYPE_CHECKING:
    from types import ModuleType

    from patchset_overlay.spec import Overlay

ENV_SWITCH = "PATCHSET_OVERLAYS"
_OFF_VALUES = ("0", "off", "false", "no")
REGISTRY = "patchset_overlay_registry"  # the registration list's module (`OVERLAYS`: the overlay packages' names)


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
