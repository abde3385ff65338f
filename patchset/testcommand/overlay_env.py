"""A fresh "pip-installed release" environment for the overlay tests: a venv that sees the locked dependencies
through one ``.pth`` line (`linked_venv`), with the pinned sdists and this project pip-installed, offline and without
build isolation. The wheel pip builds from a verified sdist is kept by the sdist's sha256 for later runs; this project
is built afresh every time: it is the code under test.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from patchset.plumbing import cachelock, files, tempdirs
from patchset.plumbing.ui import Console
from patchset.testenv.venv import REPO_ROOT, VenvError, linked_venv, run_step
from patchset.upstreams.fetch import sha256_of
from patchset.upstreams.pins import Pin

_NOT_PACKAGED = (".cache", ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__")
_NOT_PACKAGED += (".pytest_cache", ".ruff_cache")


# what the overlay tests' warm parents (tests/overlay/warm_parent.py) learn to preload: the modules importing these
# loads, less upstream's, the overlays', Hydra's
WARM_PROBE_MODULES = ("verl.trainer.ppo.core_algos", "verl.workers.utils.losses", "trinity.trainer.verl.trainer")
WARM_PROBE_MODULES += ("trinity.algorithm.policy_loss_fn.dpo_loss",)


def _sdist(cache_sdists: Path, pin: Pin) -> Path:
    """The cached sdist whose sha256 is the pinned one (the file name does not decide)."""
    for candidate in sorted(cache_sdists.iterdir()) if cache_sdists.is_dir() else ():
        if candidate.is_file() and sha256_of(candidate) == pin.sdist_sha256:
            return candidate
    raise VenvError(f"no verified sdist of {pin.label} in {cache_sdists}; run `scripts/apply.sh --no-test` first")


def _release_wheel(deps_python: Path, sdist: Path, digest: str, wheels: Path) -> Path:
    """The wheel pip builds from ``sdist`` (sha256 ``digest``), built once into ``wheels/<digest>/``: by one run at
    a time (``cachelock``), which the others wait for and then reuse."""
    shown = f"the wheel of {sdist.name} in {wheels}"
    with cachelock.hold(wheels.parent, f"sdist-wheels-{digest}", shown, Console(), wait=True, sweep=(wheels,)):
        home = wheels / digest
        built = sorted(home.glob("*.whl")) if home.is_dir() else []
        if len(built) == 1:
            return built[0]
        wheels.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("wheel", hidden=True), dir=wheels) as tmp:
            command = [str(deps_python), "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index"]
            command += ["--no-build-isolation", "--wheel-dir", tmp, str(sdist)]
            run_step(command, f"building a wheel of {sdist.name}")
            staged = Path(tmp) / "home"
            staged.mkdir()
            for wheel in Path(tmp).glob("*.whl"):
                files.fsync(wheel)  # trusted by its name alone from now on, even after a crash of the machine
                wheel.rename(staged / wheel.name)
            if home.exists():  # a broken one: out of the way in one rename, removed with the temporary folder
                home.rename(Path(tmp) / "old")
            staged.rename(home)  # whole or not at all: a run killed while building leaves only its temporary folder
        return next(home.glob("*.whl"))


def build_overlay_env(venv_dir: Path, deps_python: Path, cache_sdists: Path, pins: Sequence[Pin]) -> tuple[Path, Path]:
    """(Re)make ``venv_dir`` with the pinned releases ``pins`` and this project installed; its python and
    site-packages."""
    shutil.rmtree(venv_dir, ignore_errors=True)
    try:
        python, site = linked_venv(deps_python, venv_dir)
    except subprocess.CalledProcessError as error:
        raise VenvError(f"creating the overlay venv failed (exit {error.returncode})") from None
    wheels_dir = cache_sdists.parent / "sdist-wheels"
    wheels = [str(_release_wheel(deps_python, _sdist(cache_sdists, pin), pin.sdist_sha256, wheels_dir)) for pin in pins]
    pip = [str(deps_python), "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index"]
    pip += ["--no-build-isolation"]
    run_step([*pip, *wheels], "installing the pinned releases (wheels built from their sdists)")
    # from a clean copy: building in place would leave build/ here, and reuse stale files from an earlier build
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("project")) as tmp:
        project = Path(tmp) / "project"
        shutil.copytree(REPO_ROOT, project, ignore=shutil.ignore_patterns(*_NOT_PACKAGED))
        run_step([*pip, str(project)], "installing this project")
    return python, site
