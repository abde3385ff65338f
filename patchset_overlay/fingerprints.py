"""The fingerprints each overlay checks before it changes anything: made from an upstream's files, never by hand.

``python -m patchset_overlay fingerprints --root verl=PATH --root trinity=PATH`` prints, for every target of every
piece, the sha256 of its source segment in the release under PATH (the package folder of the pinned, unpatched
release); ``--write`` stores them in each overlay's fingerprints file, ``--check`` exits 1 when a stored one differs.
"""

from __future__ import annotations

import json
from pathlib import Path

from patchset_overlay.guard import fingerprint_key
from patchset_overlay.source import UpstreamSource
from patchset_overlay.spec import Overlay


def compute(overlay: Overlay, source: UpstreamSource) -> dict[str, str]:
    """{"module:name": sha256} for every target of the overlay, read from ``source``."""
    found = {}
    for piece in overlay.pieces:
        for target in piece.targets:
            found[fingerprint_key(target.module, target.name)] = source.fingerprint(target.module, target.name)
    return dict(sorted(found.items()))


def fingerprints_path(overlay: Overlay) -> Path:
    import importlib

    return Path(importlib.import_module(overlay.name).__file__).resolve().parent / overlay.fingerprints_file


def render(fingerprints: dict[str, str]) -> str:
    return json.dumps(fingerprints, indent=2, sort_keys=True) + "\n"


def stale(overlay: Overlay, source: UpstreamSource) -> list[str]:
    """The keys whose stored fingerprint differs from the one ``source`` gives (or is missing, or extra)."""
    path = fingerprints_path(overlay)
    stored = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    fresh = compute(overlay, source)
    return sorted(key for key in stored.keys() | fresh.keys() if stored.get(key) != fresh.get(key))
