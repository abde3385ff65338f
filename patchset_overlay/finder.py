"""A meta-path finder that calls back the moment a watched module has finished executing.

Imported at every interpreter start, so it imports nothing beyond ``sys``; it finds nothing itself, but wraps the
``exec_module`` of the loader the later finders give a watched module.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing itself costs ~15 ms at start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import ModuleType
    from typing import Any

    Callback = Callable[[ModuleType], None]


class _NotifyingLoader:
    """Wraps a loader shared between modules (e.g. a zip importer), which cannot carry a per-module hook."""

    def __init__(self, loader: Any, callback: Callback) -> None:
        self._loader, self._callback = loader, callback

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

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
            if finder is self or isinstance(finder, PostImportFinder):
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


def install(watched: Iterable[str], callback: Callback) -> PostImportFinder:
    """Put a finder for ``watched`` first on ``sys.meta_path``; once only: a second call adds to the modules the
    existing finder watches and makes ``callback`` its callback."""
    for finder in sys.meta_path:
        if isinstance(finder, PostImportFinder):
            finder.watched = finder.watched | frozenset(watched)
            finder.callback = callback
            return finder
    finder = PostImportFinder(watched, callback)
    sys.meta_path.insert(0, finder)
    return finder


def already_imported(watched: Iterable[str]) -> list[ModuleType]:
    """The watched modules that have finished importing before the finder was there (in import order)."""
    found = []
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        initializing = getattr(spec, "_initializing", False)
        if name in watched and module is not None and not initializing:
            found.append(module)
    return found
