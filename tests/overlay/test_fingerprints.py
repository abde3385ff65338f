"""The fingerprints the overlays check are those of the pinned releases, made by the command, never by hand.

`python -m patchset_overlay fingerprints --check` against the vanilla pinned checkouts must find nothing stale, and
must find a fingerprint stale as soon as one target's source differs (a one-character edit of a copy).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT


def _check(roots: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "patchset_overlay", "fingerprints", "--check"]
    command += [f"--root={name}={root}" for name, root in roots.items()]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)


def test_stored_fingerprints_match_the_pinned_releases(vanilla_trees):
    completed = _check({name: tree / name for name, tree in vanilla_trees.items()})
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.parametrize(
    ("package", "relative", "old", "stale"),
    [
        ("verl", "workers/utils/losses.py", "def value_loss(", "verl.workers.utils.losses:value_loss"),
        (
            "trinity",
            "trainer/verl/losses.py",
            "class TrinityPolicyLoss",
            "trinity.trainer.verl.losses:TrinityPolicyLoss",
        ),
    ],
)
def test_check_reports_a_changed_target_as_stale(tmp_path, vanilla_trees, package, relative, old, stale):
    root = shutil.copytree(vanilla_trees[package] / package, tmp_path / package)
    target = root / relative
    target.write_text(target.read_text(encoding="utf-8").replace(old, old.replace(" ", "  ", 1), 1), encoding="utf-8")
    completed = _check({package: root})
    assert completed.returncode == 1 and f"stale fingerprint for {stale}" in completed.stdout, completed.stdout
