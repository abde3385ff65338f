"""Fault injection: ``apply --upgrade`` killed with SIGKILL at each of its phases leaves the earlier series or
today's after the next run, never a mix.

The run is a child process (``python -c HOOK``) upgrading the fake world's verl tree, which holds an earlier
revision of its series (``make_earlier_series``), together with its Trinity tree, which holds none (today's series is
applied to it in the same run). The hook kills the child in one phase: while working the upgrade out on scratch
copies, half-way through saving the snapshot, once the first tree is installed and before the second, during the
regression tests, after the snapshots are discarded (before the record), after the record. The next run, a
``--check`` in this process, must find every tree either as it was (exit 5: the earlier series, every file as before)
or upgraded (exit 0: today's series in both trees), and leave no lock or snapshot; ``--upgrade`` then finishes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from patchset_fakes import REPO_ROOT, VERL_PATCH_1, VERL_PATCH_2, apply_by_hand, git, make_earlier_series

from patchset.cli import main

HOOK = r"""
import os, signal, sys
from patchset.apply import job, upgrade
from patchset.plumbing import files, snapshot
from patchset.cli import main

phase = os.environ["FAULT_KILL_IN"]
def kill():
    os.kill(os.getpid(), signal.SIGKILL)
def after(module, name, when=lambda *args: True):
    real = getattr(module, name)
    def wrapped(*args, **kwargs):
        result = real(*args, **kwargs)
        if when(*args):
            kill()
        return result
    setattr(module, name, wrapped)

job._regression = lambda *args: kill() if phase == "tests" else (0, [])
if phase == "prepare":  # the first tree worked out on its scratch copy; nothing changed
    after(upgrade, "prepare")
if phase == "snapshot":  # the second file saved, the snapshot's manifest not yet written
    saved = []
    after(snapshot.Snapshot, "_save", lambda self, number, rel: saved.append(rel) or len(saved) == 2)
if phase == "install":  # the verl tree upgraded, the Trinity tree not yet
    after(files, "install_paths")
if phase == "discard":  # every snapshot discarded, no record written yet
    calls = []
    after(snapshot.Snapshot, "discard", lambda self: calls.append(1) or len(calls) == 2)
if phase == "record":  # the first tree's record written
    after(upgrade, "write_record")
raise SystemExit(main(sys.argv[1:]))
"""
PHASES = {"prepare": "earlier", "snapshot": "earlier", "install": "earlier", "tests": "earlier", "discard": "today",
          "record": "today"}  # fmt: skip
FILES = {"verl": ("verl/trainer/ppo/core_algos.py", "tests/trainer/ppo/test_scale_on_cpu.py"),
         "trinity": ("trinity/trainer/verl/losses.py",)}  # fmt: skip


def _contents(world) -> dict[str, bytes | None]:
    trees = {"verl": world.verl, "trinity": world.trinity}
    return {
        f"{key}:{rel}": (trees[key] / rel).read_bytes() if (trees[key] / rel).exists() else None
        for key, paths in FILES.items()
        for rel in paths
    }


def _leftovers(world) -> list[str]:
    folders = [world.verl / ".git" / "patchset", world.trinity / ".git" / "patchset"]
    return [str(path) for folder in folders for path in folder.glob("*") if not path.name.startswith("applied-")]


def _earlier_series(world, patches: Path) -> None:
    """Both trees back at the release, then verl patched by hand with the earlier series (no record)."""
    for tree in (world.verl, world.trinity):
        git(tree, "checkout", "-q", "--", ".")
        git(tree, "clean", "-qfdx")
        for record in (tree / ".git" / "patchset").glob("applied-*"):
            record.unlink()
    apply_by_hand(world.verl, patches, VERL_PATCH_1, VERL_PATCH_2)


@pytest.fixture
def states(world, tmp_path: Path, regression_calls) -> dict[str, dict[str, bytes | None]]:
    """{"earlier": ..., "today": ...}: the files either series touches, in the earlier and the upgraded trees; the
    trees left holding the earlier series."""
    patches = make_earlier_series(world, tmp_path / "earlier")
    _earlier_series(world, patches)
    earlier = _contents(world)
    assert main(world.args("--upgrade", str(world.verl), str(world.trinity))) == 0
    today = _contents(world)
    _earlier_series(world, patches)
    assert _contents(world) == earlier != today
    return {"earlier": earlier, "today": today}


@pytest.mark.parametrize("phase", list(PHASES))
def test_upgrade_killed_in_each_phase_leaves_the_earlier_series_or_todays(world, tmp_path, states, faults, phase):
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(temp), "FAULT_KILL_IN": phase}
    argv = world.args("--upgrade", str(world.verl), str(world.trinity))
    killed = subprocess.run([sys.executable, "-c", HOOK, *argv], env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    code = main(world.args("--check", str(world.verl), str(world.trinity)))

    found = _contents(world)
    which = "earlier" if found == states["earlier"] else "today" if found == states["today"] else "a mix"
    expected = PHASES[phase]
    repaired = which == expected and not _leftovers(world)
    faults.record(f"sigkill-during-upgrade-{phase}", killed.returncode, intact=repaired, message=f"next run: {which}")
    assert (which, code) == (expected, 5 if expected == "earlier" else 0), phase
    assert _leftovers(world) == []
    assert main(world.args("--upgrade", "--no-test", str(world.verl), str(world.trinity))) == 0
    assert _contents(world) == states["today"]
