"""The fingerprints each overlay checks before it changes anything: made from an upstream's files, never by hand.

``python -m patchset_overlay fingerprints --root verl=PATH [--root verl=PATH2] --root trinity=PATH`` prints, for each
release given (the package folder of a supported, unpatched release: the pinned sdist's), the sha256 of every file the
overlay derives there (each file its series' patches change that the release lacks); ``--write`` stores them in each
overlay's fingerprints file under the release's version, ``--check`` exits 1 when a stored one differs. The file holds
``{release: {"path in the tree": sha256}}``: one set per supported release.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from patchset_overlay.derive import Plan, sha256
from patchset_overlay.source import UpstreamSource
from patchset_overlay.spec import Overlay

Fingerprints = dict[str, dict[str, str]]  # release -> {"module:name": sha256}


def compute(overlay: Overlay, source: UpstreamSource) -> dict[str, str]:
    """{"path in the tree": sha256} of every file the overlay derives on the release in ``source``, read from it."""
    plan = Plan.make(overlay, source)
    return {path: sha256(plan.installed_text(path)) for path in sorted(plan.files(plan.patches))}


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
