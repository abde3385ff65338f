"""Tell a verl or Trinity-RFT tree, and its version, from the tree's own files."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from patchset.errors import BadInput

_TRINITY_VERSION = re.compile(r"""^__version__\s*=\s*["'](?P<version>[^"']+)["']""", re.MULTILINE)


@dataclass(frozen=True)
class Detected:
    """What a tree is: ``key`` as in upstreams.toml ("verl" or "trinity"), a label, the version it declares and
    the file that declares it (``marker``, relative to the tree)."""

    key: str
    label: str
    version: str
    marker: str = field(default="", compare=False)


def _read(path: Path) -> str:
    """The text of a version file; "" when it cannot be read as UTF-8 (then the tree is not recognised)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _verl(root: Path) -> Detected | None:
    version_file = root / "verl" / "version" / "version"
    if version_file.is_file() and (root / "verl" / "trainer" / "ppo" / "core_algos.py").is_file():
        version = _read(version_file).strip()
        return Detected(key="verl", label="verl", version=version, marker="verl/version/version") if version else None
    return None


def _trinity(root: Path) -> Detected | None:
    init = root / "trinity" / "__init__.py"
    if not (init.is_file() and (root / "trinity" / "trainer" / "verl" / "losses.py").is_file()):
        return None
    match = _TRINITY_VERSION.search(_read(init))
    if not match:
        return None
    return Detected(key="trinity", label="Trinity-RFT", version=match["version"], marker="trinity/__init__.py")


def detect(root: Path, shown: str) -> Detected:
    """Detect the upstream at ``root`` (``shown`` is how to name it in messages); raise ``BadInput`` otherwise."""
    if not root.is_dir():
        raise BadInput(f"{shown} is not a directory; pass the root of a verl or Trinity-RFT checkout")
    found = [d for d in (_verl(root), _trinity(root)) if d is not None]
    if not found:
        raise BadInput(
            f"{shown} is not a verl or Trinity-RFT checkout (no verl/version/version or trinity/__init__.py)"
        )
    if len(found) > 1:
        raise BadInput(f"{shown} holds both verl and Trinity-RFT; pass the root of each tree separately")
    return found[0]
