"""An upstream package's source as it lies on disk, read without importing any of its modules.

Overlays judge a piece before any of its targets is changed, often while one of the upstream's modules is half-way
through its own import; importing a sibling module from there can hand back a half-initialised one. Reading the
files instead gives the same answer in every process, whatever has been imported, and in any order.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

_VERSION_ASSIGNMENT = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


class SourceError(RuntimeError):
    """A module or a definition the overlay needs is not where it should be in the upstream's files."""


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
    _trees: dict[str, tuple[str, ast.Module]] = field(default_factory=dict, repr=False)

    @classmethod
    def find(cls, package: str) -> UpstreamSource | None:
        root = package_root(package)
        return None if root is None else cls(package, root)

    def module_file(self, module: str) -> Path:
        """The ``.py`` file of a module (``verl.workers.utils.losses`` -> ``<root>/workers/utils/losses.py``)."""
        parts = module.split(".")
        if parts[0] != self.package:
            raise SourceError(f"{module} is not a module of {self.package}")
        base = self.root.joinpath(*parts[1:])
        return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")

    def module_text(self, module: str) -> str:
        return self._parsed(module)[0]

    def _parsed(self, module: str) -> tuple[str, ast.Module]:
        if module not in self._trees:
            path = self.module_file(module)
            try:
                text = path.read_text(encoding="utf-8")
                self._trees[module] = (text, ast.parse(text, filename=str(path)))
            except (OSError, SyntaxError, ValueError) as error:
                raise SourceError(f"cannot read {module} from {path} ({error})") from error
        return self._trees[module]

    def segment(self, module: str, name: str) -> str:
        """The source of the module-level function or class ``name``, decorators included (the last definition, as
        at run time)."""
        text, tree = self._parsed(module)
        found = [
            node
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name
        ]
        if not found:
            raise SourceError(f"{module} ({self.module_file(module)}) defines no {name}")
        node = found[-1]
        first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
        assert node.end_lineno is not None
        return "".join(text.splitlines(keepends=True)[first - 1 : node.end_lineno])

    def fingerprint(self, module: str, name: str) -> str:
        """sha256 of `segment`: any edit of the upstream definition changes it."""
        return hashlib.sha256(self.segment(module, name).encode("utf-8")).hexdigest()

    def version(self) -> str:
        """The release of the files on disk: ``<package>/version/version`` (verl) or ``__version__`` in
        ``__init__.py`` (Trinity); "unknown" when neither says."""
        version_file = self.root / "version" / "version"
        if version_file.is_file():
            return version_file.read_text(encoding="utf-8").strip()
        init = self.root / "__init__.py"
        match = _VERSION_ASSIGNMENT.search(init.read_text(encoding="utf-8")) if init.is_file() else None
        return match.group(1) if match else "unknown"
