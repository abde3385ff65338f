"""The fingerprints each overlay checks before it changes anything: made from an upstream's files, never by hand.

``python -m patchset_overlay fingerprints --root verl=PATH [--root verl=PATH2] --root trinity=PATH`` prints, for each
release given (the package folder of a supported, unpatched release), the sha256 of the source segment of every
target of the pieces that release lacks and that are written for it (a piece whose fix the release has, or written for
other releases, is never installed there, so it has none);
``--write`` stores them in each overlay's fingerprints file under the release's version, ``--check`` exits 1 when a
stored one differs. The file holds ``{release: {"module:name": sha256}}``: one set per supported release.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from patchset_overlay.guard import fingerprint_key, fixed_in, for_release
from patchset_overlay.source import UpstreamSource
from patchset_overlay.spec import Overlay

Fingerprints = dict[str, dict[str, str]]  # release -> {"module:name": sha256}


def compute(overlay: Overlay, source: UpstreamSource) -> dict[str, str]:
    """{"module:name": sha256} for every target of the pieces the release in ``source`` lacks, read from it."""
    version = source.version()
    found = {}
    for piece in overlay.pieces:
        if fixed_in(piece, version) or not for_release(piece, version):
            continue
        for target in piece.targets:
            found[fingerprint_key(target.module, target.name)] = source.fingerprint(target.module, target.name)
    return dict(sorted(found.items()))


def fingerprints_path(overlay: Overlay) -> Path:
    return Path(importlib.import_module(overlay.name).__file__).resolve().parent / overlay.fingerprints_file


def recorded(overlay: Overlay) -> Fingerprints:
    """The overlay's fingerprints file: {release: {"module:name": sha256}}; empty when it has none."""
    path = fingerprints_path(overlay)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def render(fingerprints: Fingerprints | dict[str, str]) -> str:
    return json.dumps(fingerprints, indent=2, sort_keys=True) + "\n"


def stale(overlay: Overlay, source: UpstreamSource) -> list[str]:
    """The keys whose stored fingerprint for the release in ``source`` differs from the one it gives (or is missing,
    or extra)."""
    stored = recorded(overlay).get(source.version(), {})
    fresh = compute(overlay, source)
    return sorted(key for key in stored.keys() | fresh.keys() if stored.get(key) != fresh.get(key))
