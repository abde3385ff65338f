"""Fixtures for the tooling tests; the fake trees, patches and sdists come from ``patchset_fakes``.

Also the fault registry: every fault-injection test (``test_faults*.py``) records each bad input it tried through
the ``faults`` fixture, and the end of the run prints ``faults tried: N, trees intact: N, silent successes: 0``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from patchset_fakes import (
    DEPENDENT_PATCH,
    FAULT_PROPERTY,
    FORMAT_PATCH,
    INDEPENDENT_PATCH,
    REPO_ROOT,
    TEST_GIT_ENV,
    Fault,
    FaultRecorder,
    World,
    git,
    make_world,
    world_at,
)

from patchset.plumbing import bounded
from patchset.series.model import load_series
from patchset.upstreams.fetch import resolve_cache
from patchset.upstreams.pins import load_pins


@pytest.fixture(autouse=True)
def isolated_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Keep the user's git config and the real cache out of every test; fix the identity used by fixtures. Python
    writes bytecode, as on most machines: no tree may depend on PYTHONDONTWRITEBYTECODE to stay as it was."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.invalid")
    monkeypatch.delenv("PATCHSET_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def test_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., int]:
    """``scripts/test.sh`` (``python -m patchset test``) run on a plan of the steps given, with a cache of this
    test's own: its exit code."""
    from patchset.cli import main
    from patchset.testcommand import testsuite

    def run(*steps: object, jobs: int = 1) -> int:
        monkeypatch.setattr(testsuite, "plan", lambda workspace, quick, jobs, suite_forks=None: list(steps))
        return main(["test", "--cache", str(tmp_path / "cache"), "--jobs", str(jobs)])

    return run


@pytest.fixture(scope="session")
def world_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One world built per session (it takes a few dozen git calls); ``world`` copies it for each test."""
    base = tmp_path_factory.mktemp("world-template")
    with pytest.MonkeyPatch.context() as patch:
        for key, value in TEST_GIT_ENV.items():
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
    from patchset.testenv import regression

    calls: list[tuple[dict[str, Path], str]] = []

    def fake(trees: Mapping[str, Path], run: regression.SuiteRun, workspace: object, console: object = None) -> int:
        calls.append((dict(trees), run.expect))
        return 0

    monkeypatch.setattr(regression, "run_regression_tests", fake)
    return calls


@pytest.fixture
def fake_pypi(monkeypatch: pytest.MonkeyPatch, world: World) -> list[str]:
    """Replace the pip download with a copy of the fake sdists; returns the list of names downloaded."""
    from patchset.upstreams import fetch

    downloads: list[str] = []

    def download(name: str, version: str, dest: Path) -> Path:
        downloads.append(f"{name}=={version}")
        return Path(shutil.copy(world.sdists[name], dest))

    monkeypatch.setattr(fetch, "pip_download", download)
    return downloads


# --- the pinned checkouts, for the tests that run the real series -----------------------------------------


@pytest.fixture(scope="session")
def pinned_templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{key: a clone of the cached vanilla checkout of each default pin}, made once per session; skips when the
    cache has no checkouts (``scripts/test.sh`` fetches them first)."""
    cache = resolve_cache(None, os.environ, REPO_ROOT)
    base = tmp_path_factory.mktemp("pinned")
    templates: dict[str, Path] = {}
    for pin in load_pins(REPO_ROOT / "patches" / "upstreams.toml").defaults():
        vanilla = cache.upstreams / pin.dirname
        if not (vanilla / ".git").exists():
            pytest.skip(f"no cached checkout of {pin.label} at {vanilla} (scripts/test.sh fetches it)")
        clone = base / pin.dirname
        command = ["git", "clone", "-q", "--no-hardlinks", str(vanilla), str(clone)]
        subprocess.run(command, check=True, capture_output=True, env={**os.environ, **TEST_GIT_ENV})
        templates[pin.key] = clone
    return templates


@pytest.fixture
def pinned(pinned_templates: dict[str, Path], tmp_path: Path) -> Callable[..., Path]:
    """``pinned("verl")``: a throwaway copy of the pinned checkout (``dest`` to choose where)."""

    def copy(key: str, dest: Path | None = None) -> Path:
        target = dest or tmp_path / "trees" / pinned_templates[key].name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(pinned_templates[key], target, symlinks=True)
        return target

    return copy


def _format_patch(repo: Path, subject: str, dest: Path) -> None:
    git(repo, "commit", "-qam", f"{subject}\n\nA second patch for the fault-injection tests.\n\nForwarded: no")
    dest.write_text(git(repo, *FORMAT_PATCH, "-1", "--stdout"))


@pytest.fixture(scope="session")
def fake_series(pinned_templates: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Patches dirs holding the real series, its verl part cut to 0001, plus a second verl patch: {"dependent": ...
    (0002 changes a line that 0001 adds, and appends to README.md), "independent": ... (0002 only appends to
    README.md)}. The real verl patches after 0001 are left out, so each case knows the whole verl series."""
    base = tmp_path_factory.mktemp("fake-series")
    work = base / "work"
    with pytest.MonkeyPatch.context() as patch:
        for key, value in TEST_GIT_ENV.items():
            patch.setenv(key, value)
        git(base, "clone", "-q", str(pinned_templates["verl"]), str(work))
        git(work, "apply", str(load_series(REPO_ROOT / "patches", "verl").patches[0].path))
        git(work, "add", "-A")
        git(work, "commit", "-qm", "0001")
        critic = work / "verl/workers/config/critic.py"
        old, new = "loss_scale_factor: Optional[int] = None", "loss_scale_factor: Optional[float] = None"
        critic.write_text(critic.read_text().replace(old, new))
        readme = work / "README.md"
        readme.write_text(readme.read_text() + "\nThe critic's loss_scale_factor may be a float.\n")
        _format_patch(work, "[trainer] fix: critic loss_scale_factor may be a float", base / DEPENDENT_PATCH)
        git(work, "reset", "-q", "--hard", "v0.8.0")
        readme = work / "README.md"
        readme.write_text(readme.read_text() + "\nPatched with the verl-trinity patchset.\n")
        _format_patch(work, "[docs] chore: mention the patchset in the README", base / INDEPENDENT_PATCH)
    dirs: dict[str, Path] = {}
    for kind, second in (("dependent", DEPENDENT_PATCH), ("independent", INDEPENDENT_PATCH)):
        patches = shutil.copytree(REPO_ROOT / "patches", base / kind)
        first, *later = load_series(patches, "verl").patches
        for patch in later:
            patch.path.unlink()
        shutil.copy(base / second, patches / "verl" / second)
        (patches / "verl" / "series").write_text(f"{first.path.name}\n{second}\n")
        dirs[kind] = patches
    return dirs


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system temp folder for this test is a folder of its own: backups made by a snapshot land there, where a
    test can see that they are discarded (and the real temp folder is never written)."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


# --- the fault registry -----------------------------------------------------------------------------------


FAULTS = pytest.StashKey[list[Fault]]()


class _FaultCollector:
    """Gathers the faults recorded in each test's report into the session's registry: in this process, or from
    every pytest-xdist worker in the main one."""

    def __init__(self, log: list[Fault]) -> None:
        self.log = log

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and not (report.when == "setup" and report.failed):
            return  # once per test: its call, or its setup when that failed (each report holds them all)
        self.log += [Fault(**value) for name, value in report.user_properties if name == FAULT_PROPERTY]


def pytest_configure(config: pytest.Config) -> None:
    bounded.register(config)  # names the test a hung run is in (`patchset.plumbing.bounded`)
    config.stash[FAULTS] = []
    config.pluginmanager.register(_FaultCollector(config.stash[FAULTS]), "patchset-fault-collector")


@pytest.fixture
def faults(request: pytest.FixtureRequest) -> FaultRecorder:
    return FaultRecorder(request.node.user_properties, request.node.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    log = config.stash.get(FAULTS, [])
    if not log:
        skipped = [r for r in terminalreporter.stats.get("skipped", []) if "test_faults" in r.nodeid]
        if skipped:
            terminalreporter.write_line(f"faults tried: 0 (the fault suite was skipped: {skipped[0].longrepr[-1]})")
        return
    intact = sum(1 for fault in log if fault.intact)
    silent = [fault for fault in log if fault.silent_success]
    terminalreporter.write_line(f"faults tried: {len(log)}, trees intact: {intact}, silent successes: {len(silent)}")
    for fault in log:
        if fault.silent_success or not fault.intact:
            problem = "exited 0 (silent success)" if fault.silent_success else "changed the tree"
            terminalreporter.write_line(f"  {fault.test} [{fault.case}]: {problem}")
        elif config.option.verbose > 0:  # -v: every case, its exit status and its message
            terminalreporter.write_line(f"  {fault.case} -> {fault.code} -> {fault.message}")
