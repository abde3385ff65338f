"""Wiring for the overlay tests: the "pip-installed release" environment and the patched checkouts to compare with.

`tests.harness.testsuite` builds the environment (`tests.harness.overlay_env`: a fresh venv with the pinned verl and
trinity-rft sdists and this project pip-installed) and names it and the patched trees in the environment:

- ``PATCHSET_OVERLAY_PYTHON``: that venv's python; every check runs in a child process of it, because what an
  overlay does is a property of a whole process (as it is in a Ray worker);
- ``PATCHSET_PATCHED_VERL_TREE`` / ``PATCHSET_PATCHED_TRINITY_TREE``: the patched checkouts (parity);
- ``PATCHSET_VANILLA_VERL_TREE`` / ``PATCHSET_VANILLA_TRINITY_TREE``: the vanilla checkouts (fingerprints);
- ``PATCHSET_FIXED_VERL_TREE``: the verl 0.9.1 release, which has the critic fix (a guard test; optional).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]


# the longest modules first: under pytest-xdist (one file per worker) the short ones fill in around them
LONGEST_FIRST = ("test_import_order.py", "test_activation.py", "test_guards.py", "test_ray.py", "test_parity.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: position for position, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def _every_piece() -> int:
    """How many entries `status` lists when everything is active: each code piece, and verl's critic YAML."""
    from patchset_overlay import overlays

    return sum(len(overlay.pieces) for overlay in overlays()) + 1


EVERY_PIECE = _every_piece()


def _path_from_env(variable: str, resolve: bool = True) -> Path:
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} is not set (run the overlay tests through scripts/test.sh)")
    return Path(value).resolve() if resolve else Path(value).absolute()


@pytest.fixture(scope="session")
def overlay_python() -> Path:
    """Not resolved: a venv's python is a symlink to the base interpreter, which would leave the venv."""
    return _path_from_env("PATCHSET_OVERLAY_PYTHON", resolve=False)


@pytest.fixture(scope="session")
def overlay_site(overlay_python: Path) -> Path:
    """The site-packages of the overlay venv, where verl, trinity and the overlays are installed."""
    command = [str(overlay_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    return Path(subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout.strip())


@pytest.fixture(scope="session")
def patched_trees() -> dict[str, Path]:
    return {
        "verl": _path_from_env("PATCHSET_PATCHED_VERL_TREE"),
        "trinity": _path_from_env("PATCHSET_PATCHED_TRINITY_TREE"),
    }


@pytest.fixture(scope="session")
def vanilla_verl_tree() -> Path:
    return _path_from_env("PATCHSET_VANILLA_VERL_TREE")


@pytest.fixture(scope="session")
def vanilla_trees(vanilla_verl_tree: Path) -> dict[str, Path]:
    return {"verl": vanilla_verl_tree, "trinity": _path_from_env("PATCHSET_VANILLA_TRINITY_TREE")}


def overlay_env(switch: str | None, pythonpath: list[Path] = ()) -> dict[str, str]:
    """Environment for a child of the overlay venv: PATCHSET_OVERLAYS set to ``switch`` (None: unset)."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PATCHSET_OVERLAYS")}
    if switch is not None:
        env["PATCHSET_OVERLAYS"] = switch
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(path) for path in pythonpath)
    return env


def run_json(python: Path, script: Path, args: list[str], env: dict[str, str], timeout: int = 600) -> dict:
    """Run ``script`` with ``python -P`` (the checkout's own packages never shadow the installed ones) and return
    the JSON object it prints on its last stdout line; stderr is kept for the assertion messages."""
    completed = subprocess.run(
        [str(python), "-P", str(script), *args],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert completed.returncode == 0, f"{script.name} {args} failed:\n{completed.stdout}\n{completed.stderr[-4000:]}"
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["stderr"] = completed.stderr
    return result
