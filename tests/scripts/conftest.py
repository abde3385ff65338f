"""Fixtures for the tooling tests; the fake trees, patches and sdists come from ``patchset_fakes``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest
from patchset_fakes import World, make_world, world_at


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the user's git config and the real cache out of every test; fix the identity used by fixtures."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.invalid")
    monkeypatch.delenv("PATCHSET_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def world_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One world built per session (it takes a few dozen git calls); ``world`` copies it for each test."""
    base = tmp_path_factory.mktemp("world-template")
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    for role in ("AUTHOR", "COMMITTER"):
        env |= {f"GIT_{role}_NAME": "Test", f"GIT_{role}_EMAIL": "test@example.invalid"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        make_world(base)
    return base


@pytest.fixture
def world(world_template: Path, tmp_path: Path) -> World:
    """A fresh copy of the fake world in this test's tmp_path."""
    shutil.copytree(world_template, tmp_path, symlinks=True, dirs_exist_ok=True)
    return world_at(tmp_path)


@pytest.fixture
def regression_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict[str, Path], str]]:
    """Replace ``run_regression_tests`` with a recorder returning 0; returns the list of calls."""
    from patchset import regression

    calls: list[tuple[dict[str, Path], str]] = []

    def fake(trees: Mapping[str, Path], expect: str = "fixed") -> int:
        calls.append((dict(trees), expect))
        return 0

    monkeypatch.setattr(regression, "run_regression_tests", fake)
    return calls


@pytest.fixture
def fake_pypi(monkeypatch: pytest.MonkeyPatch, world: World) -> list[str]:
    """Replace the pip download with a copy of the fake sdists; returns the list of names downloaded."""
    from patchset import fetch

    downloads: list[str] = []

    def download(name: str, version: str, dest: Path) -> Path:
        downloads.append(f"{name}=={version}")
        return Path(shutil.copy(world.sdists[name], dest))

    monkeypatch.setattr(fetch, "pip_download", download)
    return downloads
