"""What interpreter start-up reads, records and installs: the registered overlays, the switch that keeps them off,
what the start-up did in this process, and the import finder that calls back once a watched module has executed.

The overlays are the packages ``patchset_overlay_registry.OVERLAYS`` names: a list module rather than entry points,
as ``importlib.metadata`` costs ~50 ms at every interpreter start (measured), and a module is found also where no
``.dist-info`` is (a checkout, Ray's ``py_modules``). It imports nothing beyond ``os`` and ``sys``: a process that
never imports a watched module pays for one set lookup per import.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing itself costs ~15 ms at start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import ModuleType
    from typing import Any

    from patchset_overlay.spec import Overlay

    Callback = Callable[[ModuleType], None]

ENV_SWITCH = "PATCHSET_OVERLAYS"
_OFF_VALUES = ("0", "off", "false", "no")
_ON_VALUES = ("", "1", "on", "true", "yes")
REGISTRY = "patchset_overlay_registry"  # the registration list's module (`OVERLAYS`: the overlay packages' names)
AUTOMATIC = "automatic (patchset_overlay.pth)"
# what the start-up did in this process, for `status`: AUTOMATIC, or why the overlays stay off ("" without a start-up)
outcome = ""


def _registered() -> list[ModuleType]:
    """The overlay packages the registration list names, imported (``__import__``: ``importlib`` costs at start)."""
    packages = []
    for name in __import__(REGISTRY).OVERLAYS:
        __import__(name)
        packages.append(sys.modules[name])
    return packages


def overlays() -> tuple[Overlay, ...]:
    """Every registered overlay, in the registration list's order (their specs import no upstream code)."""
    return tuple(package.overlay() for package in _registered())


def watched_modules() -> tuple[str, ...]:
    """Every upstream module a registered overlay changes, without importing the overlays' machinery."""
    return tuple(module for package in _registered() for module in package.WATCHED)


def _switch() -> str:
    """``PATCHSET_OVERLAYS`` as it is compared with `_OFF_VALUES` and `_ON_VALUES` ("" where unset)."""
    return os.environ.get(ENV_SWITCH, "").strip().lower()


def switched_off() -> bool:
    """Whether ``PATCHSET_OVERLAYS`` turns automatic activation off (0, off, false, no)."""
    return _switch() in _OFF_VALUES


def start(first_use: Callback) -> None:
    """Switch the overlays on in this process unless ``PATCHSET_OVERLAYS`` says not to: put an import finder on
    ``sys.meta_path`` for the modules they change, which calls ``first_use`` when the first of them is imported. A
    value it does not understand (a typo) keeps the default, on, and says so: neither way may pass silently."""
    global outcome
    if switched_off():
        outcome = f"switched off by {ENV_SWITCH}={os.environ[ENV_SWITCH]}"
        return
    if not outcome and _switch() not in _ON_VALUES:  # a 3.11 venv starts twice: said once
        print(
            f"warning: patchset_overlay: {ENV_SWITCH}={os.environ[ENV_SWITCH]} is not understood (off: "
            f"{', '.join(_OFF_VALUES)}; on: {', '.join(_ON_VALUES[1:])}); the overlays stay on",
            file=sys.stderr,
        )
    install(watched_modules(), first_use)
    outcome = AUTOMATIC


class _NotifyingLoader:
    """Wraps a loader shared between modules (e.g. a zip importer), which cannot carry a per-module hook."""

    def __init__(self, loader: Any, callback: Callback) -> None:
        self._loader, self._callback = loader, callback

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PostImportFinder:
    """``sys.meta_path`` entry: `callback(module)` runs right after each module named in `watched` executed."""

    def __init__(self, watched: Iterable[str], callback: Callback) -> None:
        self.watched = frozenset(watched)
        self.callback = callback

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.watched:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, PostImportFinder):
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        if getattr(loader, "name", None) == fullname:  # a file loader made for this module alone
            upstream_exec = loader.exec_module
            callback = self.callback

            def exec_module(module: ModuleType) -> None:
                del loader.exec_module  # once: a reload finds the module again, through this finder
                upstream_exec(module)
                callback(module)

            loader.exec_module = exec_module
        else:
            spec.loader = _NotifyingLoader(loader, self.callback)
        return spec


def install(watched: Iterable[str], callback: Callback) -> None:
    """Put a finder for ``watched`` first on ``sys.meta_path``; once only: a second call adds to the modules the
    existing finder watches and makes ``callback`` its callback."""
    for finder in sys.meta_path:
        if isinstance(finder, PostImportFinder):
            finder.watched = finder.watched | frozenset(watched)
            finder.callback = callback
            return
    sys.meta_path.insert(0, PostImportFinder(watched, callback))


def already_imported(watched: Iterable[str]) -> list[ModuleType]:
    """The watched modules that have finished importing before the finder was there (in import order)."""
    imported = [module for name, module in list(sys.modules.items()) if name in watched and module is not None]
    return [module for module in imported if not getattr(getattr(module, "__spec__", None), "_initializing", False)]
