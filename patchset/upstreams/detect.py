"""Tell a verl or Trinity-RFT tree, and its version, from the tree's own files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from patchset.plumbing.errors import BadInput
from patchset.upstreams.registry import UPSTREAMS, Upstream


@dataclass(frozen=True)
class Detected:
    """What a tree is: ``key`` as in upstreams.toml ("verl" or "trinity"), a label, the version it declares and
    the file that declares it (``marker``, relative to the tree)."""

    key: str
    label: str
    version: str
    marker: str = field(default="", compare=False)


def _detected(root: Path, upstream: Upstream) -> Detected | None:
    if not upstream.is_tree(root):
        return None
    version = upstream.read_version(root)
    return Detected(upstream.key, upstream.title, version, marker=upstream.version_file) if version else None


def _either(names: list[str], word: str = "or") -> str:
    return ", ".join(names[:-1]) + f" {word} {names[-1]}" if len(names) > 1 else "".join(names)


def detect(root: Path, shown: str) -> Detected:
    """Detect the upstream at ``root`` (``shown`` is how to name it in messages); raise ``BadInput`` otherwise."""
    titles = _either([upstream.title for upstream in UPSTREAMS.values()])
    if not root.is_dir():
        raise BadInput(f"{shown} is not a directory; pass the root of a {titles} checkout")
    found = [d for d in (_detected(root, upstream) for upstream in UPSTREAMS.values()) if d is not None]
    if not found:
        files = _either([upstream.version_file for upstream in UPSTREAMS.values()])
        raise BadInput(f"{shown} is not a {titles} checkout (no {files})")
    if len(found) > 1:
        held = ("both " if len(found) == 2 else "") + _either([d.label for d in found], "and")
        raise BadInput(f"{shown} holds {held}; pass the root of each tree separately")
    return found[0]
