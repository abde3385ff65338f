"""The pinned releases the test command gives steps of their own, found by their role in ``patches/upstreams.toml``
rather than named here: a release that has part of its series upstream (verl 0.9.1 today), and a release of another
line, with a series of its own (verl 0.7.1). Pin a newer one and the steps follow it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing import gitops
from patchset.plumbing.errors import PatchsetError
from patchset.plumbing.paths import REPO_ROOT
from patchset.series.model import Patch, load_series
from patchset.upstreams.pins import Pin, Pins, at_least, release_key
from patchset.upstreams.workspace import Workspace


def upstream_has(pin: Pin, patches: list[Patch] | tuple[Patch, ...]) -> list[Patch]:
    """The patches of ``pin``'s series its release has upstream, by their ``Applied-Upstream`` version."""
    return [p for p in patches if p.upstream_since and at_least(pin.version, p.upstream_since)]


def split_by_upstream(pin: Pin, patches: list[Patch] | tuple[Patch, ...]) -> tuple[list[Patch], list[Patch]]:
    """The patches of ``pin``'s series as (those its release has upstream, `upstream_has`; the others, which apply)."""
    merged = upstream_has(pin, patches)
    return merged, [p for p in patches if p not in merged]


def patched_clone(vanilla: Path, clone: Path, workspace: Workspace, env: Mapping[str, str]) -> str:
    """A fresh clone of ``vanilla`` at ``clone``, patched as a user patches one (``patchset apply --no-test``) with
    the run's own series and cache; what apply said. ``PatchsetError`` where it fails."""
    gitops.clone_local(vanilla, clone)
    command = [sys.executable, "-m", "patchset", "apply", "--no-test", "--cache", str(workspace.cache.root)]
    command += ["--patches-dir", str(workspace.patches_dir), str(clone)]
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    print(result.stdout + result.stderr, end="", flush=True)
    if result.returncode != 0:
        raise PatchsetError(f"patchset apply exited {result.returncode} on a fresh clone of {vanilla}")
    return result.stdout + result.stderr


def other_lines(pins: Pins) -> list[Pin]:
    """The pinned targets whose series is not that of their upstream's default pin: releases of another line."""
    return [
        pin
        for pin in pins.pins
        if pin.target and (default := pins.default_for(pin.key)) is not None and pin.series != default.series
    ]


@dataclass(frozen=True)
class Releases:
    """``partial``: the newest pinned target that has some patches of its series upstream and lacks others (the
    release the upstream fixes were checked on, ``PATCHSET_FIXED_VERL_TREE``); ``line``: the newest release of
    another line (`other_lines`)."""

    partial: Pin
    line: Pin


def find_releases(workspace: Workspace) -> Releases:
    """The `Releases` of ``workspace``'s pins; a ``PatchsetError`` naming the file when it pins none of a kind."""
    pins = workspace.pins
    targets = {pin: load_series(workspace.patches_dir, pin.series).patches for pin in pins.pins if pin.target}
    partial = [pin for pin, patches in targets.items() if 0 < len(upstream_has(pin, patches)) < len(patches)]
    lines = other_lines(pins)
    if not partial or not lines:
        kind = "release that has part of its series upstream" if not partial else "release of another line"
        raise PatchsetError(f"{pins.source} pins no {kind}, which the test command has a step for")
    return Releases(partial=_newest(partial), line=_newest(lines))


def _newest(pins: list[Pin]) -> Pin:
    return max(pins, key=lambda pin: release_key(pin.version))
