"""The run's workspace (patches folder, pins, cache) is resolved once, with the documented defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from patchset.plumbing.errors import BadInput
from patchset.upstreams.workspace import resolve_workspace

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_repository_patches_and_the_environment_cache(tmp_path: Path) -> None:
    workspace = resolve_workspace(None, None, {"PATCHSET_CACHE": str(tmp_path / "shared")}, REPO_ROOT)
    assert workspace.patches_dir == REPO_ROOT / "patches"
    assert workspace.pins.source == REPO_ROOT / "patches" / "upstreams.toml"
    assert workspace.cache.root == (tmp_path / "shared").resolve()


def test_a_patches_dir_without_pins_is_bad_input_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"upstreams\.toml not found"):
        resolve_workspace(tmp_path, str(tmp_path / "cache"), {}, REPO_ROOT)
