"""The patches folder, its pins and the cache: resolved once from the command line, then passed down as one value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing.paths import REPO_ROOT
from patchset.upstreams.fetch import Cache, resolve_cache
from patchset.upstreams.pins import Pins, load_pins

PINS_FILE = "upstreams.toml"


@dataclass(frozen=True)
class Workspace:
    """Resolved once and handed down, so that no layer below picks its own default or reads its pins again."""

    patches_dir: Path
    pins: Pins
    cache: Cache


def patches_dir_of(option: str | Path | None, repo_root: Path = REPO_ROOT) -> Path:
    """``--patches-dir``, else the repository's ``patches/``; for the series lint, which must not stop at a bad
    ``upstreams.toml`` the way `resolve_workspace` does."""
    return Path(option).expanduser() if option else repo_root / "patches"


def resolve_workspace(
    patches_option: str | Path | None,
    cache_option: str | None,
    environ: Mapping[str, str],
    repo_root: Path = REPO_ROOT,
) -> Workspace:
    """``--patches-dir`` (else the repository's ``patches/``) with its pins read and checked, and the cache."""
    patches_dir = patches_dir_of(patches_option, repo_root)
    return Workspace(
        patches_dir=patches_dir,
        pins=load_pins(patches_dir / PINS_FILE),
        cache=resolve_cache(cache_option, environ, repo_root),
    )
