"""Entry scripts run their own checkout's code, whatever the working directory.

``python3 -m`` puts the working directory first on ``sys.path``, so a script started from inside another checkout
of this project used to import that checkout's ``patchset`` and act on that checkout's patches. Two ways in:

- every script's ``--help`` (the shell scripts', and ``scripts/gpu_proof.py``'s) from a folder whose ``patchset`` (and
  overlay packages) refuse to be imported;
- the case it was seen in: a copy of this project whose verl patch is cut to its header, linted with the copy's
  own ``scripts/export.sh lint`` from inside this (intact) checkout, must report the copy's broken patch.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchset.plumbing.paths import REPO_ROOT

SCRIPTS = ("apply.sh", "build-wheels.sh", "export-pr.sh", "export.sh", "test.sh")
PYTHON_SCRIPTS = ("gpu_proof.py",)
DECOY_PACKAGES = ("patchset", "patchset_overlay", "verl_overlay", "trinity_overlay", "tests")


@pytest.fixture
def decoy_checkout(tmp_path: Path) -> Path:
    """A folder that looks like another checkout whose packages cannot be imported."""
    for package in DECOY_PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(f'raise ImportError("the decoy {package} was imported")\n')
        (tmp_path / package / "__main__.py").write_text(f'raise SystemExit("the decoy {package} ran")\n')
    return tmp_path


@pytest.mark.parametrize("script", SCRIPTS + PYTHON_SCRIPTS)
def test_script_runs_its_own_code_from_inside_another_checkout(decoy_checkout, script):
    runner = sys.executable if script.endswith(".py") else "bash"
    completed = subprocess.run(
        [runner, str(REPO_ROOT / "scripts" / script), "--help"],
        cwd=decoy_checkout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert "decoy" not in completed.stdout + completed.stderr
    assert "usage:" in completed.stdout


def _copy_of_this_project(destination: Path) -> Path:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, check=True, capture_output=True, text=True
    ).stdout.split("\0")
    for relative in filter(None, tracked):
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / relative, target)
    return destination


def test_broken_copy_linted_from_inside_an_intact_checkout_reports_its_own_patch(tmp_path):
    copy = _copy_of_this_project(tmp_path / "copy")
    patch = next((copy / "patches" / "verl").glob("0001-*.patch"))
    text = patch.read_text(encoding="utf-8")
    patch.write_text(text[: text.index("\ndiff --git ") + 1], encoding="utf-8")  # the header alone

    from_inside = subprocess.run(
        ["bash", str(copy / "scripts" / "export.sh"), "lint"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    intact = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "export.sh"), "lint"], cwd=copy, capture_output=True, text=True
    )

    assert from_inside.returncode != 0 and patch.name in from_inside.stdout + from_inside.stderr, from_inside
    assert intact.returncode == 0, intact.stdout + intact.stderr
