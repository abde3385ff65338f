"""The fingerprints the overlays check are those of the pinned releases, made by the command, never by hand.

`python -m patchset_overlay fingerprints --check` against the vanilla pinned checkouts (and verl 0.9.1 and 0.7.1,
the other releases the verl overlay accepts) must find nothing stale, and must find a fingerprint stale as soon as one
file the overlay derives differs (a one-character edit of a copy).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT


def _check(roots: list[tuple[str, Path]]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "patchset_overlay", "fingerprints", "--check"]
    command += [f"--root={name}={root}" for name, root in roots]
    return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)


def test_stored_fingerprints_match_the_pinned_releases(vanilla_trees):
    roots = [(name, tree / name) for name, tree in vanilla_trees.items()]
    fixed_verl = os.environ.get("PATCHSET_FIXED_VERL_TREE")
    if not fixed_verl:
        pytest.skip("PATCHSET_FIXED_VERL_TREE is not set (scripts/test.sh fetches verl 0.9.1 and sets it)")
    # verl 0.7.1, a release of another line with pieces of its own (set by scripts/test.sh, like verl 0.9.1)
    line_verl = os.environ.get("PATCHSET_RELEASE_LINE_VERL_TREE")
    others = [("verl", Path(fixed_verl) / "verl"), *([("verl", Path(line_verl) / "verl")] if line_verl else [])]
    completed = _check([*roots, *others])
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.parametrize(
    ("package", "relative", "old", "stale"),
    [
        ("verl", "workers/utils/losses.py", "def value_loss(", "verl/workers/utils/losses.py"),
        ("trinity", "trainer/verl/losses.py", "class TrinityPolicyLoss", "trinity/trainer/verl/losses.py"),
    ],
)
def test_check_reports_a_changed_target_as_stale(tmp_path, vanilla_trees, package, relative, old, stale):
    root = shutil.copytree(vanilla_trees[package] / package, tmp_path / package)
    target = root / relative
    target.write_text(target.read_text(encoding="utf-8").replace(old, old.replace(" ", "  ", 1), 1), encoding="utf-8")
    completed = _check([(package, root)])
    assert completed.returncode == 1 and f"stale fingerprint for {stale}" in completed.stdout, completed.stdout
