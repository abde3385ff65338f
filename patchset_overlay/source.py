"""An upstream package as it lies on disk: its folder and release, found without importing any of its modules.

Overlays judge a piece before any of its modules is changed, often while one of the upstream's modules is half-way
through its own import; importing a sibling module from there can hand back a half-initialised one. Reading the
files instead gives the same answer in every process, whatever has been imported, and in any order.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

_VERSION_ASSIGNMENT = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def package_root(package: str) -> Path | None:
    """The folder of a top-level package: the imported one if it is imported, else where import would find it."""
    module = sys.modules.get(package)
    if module is not None and getattr(module, "__file__", None):
        return Path(module.__file__).resolve().parent
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@dataclass
class UpstreamSource:
    """The files of one installed upstream package, e.g. ``UpstreamSource("verl", Path(".../site-packages/verl"))``."""

    package: str
    root: Path

    @classmethod
    def find(cls, package: str) -> UpstreamSource | None:
        root = package_root(package)
        return None if root is None else cls(package, root)

    def version(self) -> str:
        """The release of the files on disk: ``<package>/version/version`` (verl) or ``__version__`` in
        ``__init__.py`` (Trinity); "unknown" when neither says."""
        version_file = self.root / "version" / "version"
        if version_file.is_file():
            return version_file.read_text(encoding="utf-8").strip()
        init = self.root / "__init__.py"
        match = _VERSION_ASSIGNMENT.search(init.read_text(encoding="utf-8")) if init.is_file() else None
        return match.group(1) if match else "unknown"
