"""Fault injection: one run per tree. Two runs on one tree at once never both change it: the second exits 4 and
names the first (its pid, when it started); a run killed with SIGKILL at any moment, even half-way through writing
a patch, leaves a state that the next run repairs (restoring the tree from the killed run's snapshot, and saying
so) before it does what it was asked; and nothing a killed run left in the temp folder outlives the next run.

The runs are child processes (``python -c HOOK``) on the small fake trees of ``patchset_fakes`` (two verl patches,
one Trinity patch), each with a temp folder of the test's own (``TMPDIR``). The hook kills its own process with
SIGKILL after its Nth git call (N drawn with a fixed seed over every git call of a whole run), or half-way through
writing a patch's first file, or pauses holding the lock until the test lets it go.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from patchset_fakes import REPO_ROOT, TRINITY_PATCH, VERL_PATCH_1, VERL_PATCH_2, tree_state

from patchset.cli import main
from patchset.plumbing import treelock

HOOK = r"""
import os, signal, sys, tempfile, time
from pathlib import Path
from patchset.plumbing import gitops, patchtext
from patchset.plumbing.ui import Console
from patchset.cli import main

env = os.environ
kill_at, calls = int(env.get("FAULT_KILL_AT_GIT_CALL") or 0), [0]
real_run_git = gitops.run_git
def run_git(*args, **kwargs):
    result = real_run_git(*args, **kwargs)
    calls[0] += 1
    if env.get("FAULT_COUNT"):
        Path(env["FAULT_COUNT"]).write_text(str(calls[0]))
    if calls[0] == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return result
gitops.run_git = run_git
if env.get("FAULT_HALF_WRITE"):  # the patch's first file cut in half on the real tree, then killed
    real_apply = gitops.apply_patch
    def apply_patch(cwd, patch, *, reverse=False, check=False, directory=""):
        scratch = Path(cwd).resolve().is_relative_to(Path(tempfile.gettempdir()).resolve())  # the plan's copies
        if not check and not scratch and patch.name == env["FAULT_HALF_WRITE"]:
            target = Path(cwd) / directory / patchtext.patch_paths(patch.read_text())[0]
            data = target.read_bytes()
            target.write_bytes(data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return real_apply(cwd, patch, reverse=reverse, check=check, directory=directory)
    gitops.apply_patch = apply_patch
if env.get("FAULT_PAUSE_ON"):  # hold the lock, paused after this progress line, until the test lets go
    marker, real_step = Path(env["FAULT_MARKER"]), Console.step
    def step(self, message):
        real_step(self, message)
        if message.startswith(env["FAULT_PAUSE_ON"]):
            marker.write_text(message)
            for _ in range(1500):
                if marker.with_name("go").exists():
                    break
                time.sleep(0.02)
    Console.step = step
raise SystemExit(main(sys.argv[1:]))
"""


def _child(world, temp: Path, *argv: str, **hook: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(temp), **hook}
    command = [sys.executable, "-c", HOOK, *world.args("--no-test", *argv)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(world, temp: Path, *argv: str, **hook: str) -> tuple[int, str, str]:
    proc = _child(world, temp, *argv, **hook)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _leftovers(temp: Path, *trees: Path) -> list[str]:
    """What runs left behind: scratch folders in the temp folder, a lock or snapshot in a tree's git directory (the
    record of the series applied, ``applied-<key>.json``, is meant to stay)."""
    kept = [p for t in trees for p in (t / ".git" / "patchset").glob("*") if not p.name.startswith("applied-")]
    return [p.name for p in temp.iterdir()] + [str(p) for p in kept]


@pytest.fixture
def temp(tmp_path: Path) -> Path:
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    return folder


@pytest.fixture
def states(world, temp: Path) -> dict[str, str]:
    """{"pristine": ..., "applied": ...}: ``tree_state`` of both fake trees before and after a clean run."""
    trees = (world.verl, world.trinity)
    pristine = tree_state(*trees)
    assert main(world.args("--no-test", str(world.verl), str(world.trinity))) == 0
    applied = tree_state(*trees)
    assert main(world.args("--reverse", str(world.verl), str(world.trinity))) == 0
    assert tree_state(*trees) == pristine
    return {"pristine": pristine, "applied": applied}


def test_second_run_on_a_held_tree_exits_4_naming_the_holder_and_changes_nothing(world, temp, tmp_path, faults):
    marker = tmp_path / "paused"
    first = _child(world, temp, str(world.verl), FAULT_PAUSE_ON=f"Applying {VERL_PATCH_2}", FAULT_MARKER=str(marker))
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), first.communicate()
        held = tree_state(world.verl)

        code, _, err = _run(world, temp, str(world.verl))

        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        intact = tree_state(world.verl) == held
        faults.record("second-run-on-a-held-tree", code, intact=intact, message=errors[-1] if errors else err)
        assert code == 4, err
        assert intact
        assert len(errors) == 1 and str(world.verl) in errors[0], err
        assert f"another run (pid {first.pid}, started " in errors[0] and "patchset apply --patches-dir" in errors[0], (
            err
        )
        assert "nothing was changed" in errors[0] and "wait for that run to end" in errors[0]
    finally:
        (tmp_path / "go").touch()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert f"* Applying {VERL_PATCH_2} (2/2)" in out
    assert _leftovers(temp, world.verl) == []


def test_a_tree_held_mid_change_is_refused_as_held_not_as_no_checkout(world, temp):
    """A run reads a tree (its kind and version) before it can lock it. Mid-change, another run's ``git apply`` has
    removed a file that tells the tree (verl's core_algos.py, which patches change) and not yet written it back: the
    second run must say that the tree is held (exit 4, naming the holder), not that it is no checkout (exit 2; seen
    once in the parallel-runs test under load)."""
    folder = Path(
        subprocess.check_output(["git", "rev-parse", "--absolute-git-dir"], cwd=world.verl, text=True).strip()
    )
    lock = treelock.acquire(folder / "patchset", "patchset apply (a run mid-change)")
    marker = world.verl / "verl" / "trainer" / "ppo" / "core_algos.py"
    text = marker.read_text()
    marker.unlink()
    try:
        code, _, err = _run(world, temp, str(world.verl))
    finally:
        marker.write_text(text)
        lock.release()
    assert code == 4, err
    assert f"is being changed or checked by another run (pid {os.getpid()}, started " in err, err
    assert "a run mid-change" in err and "not a verl or Trinity-RFT checkout" not in err, err


def test_parallel_runs_on_one_tree_end_applied_and_the_loser_says_why(world, temp, states):
    """Three trials of two runs started together: each exits 0 (it ran first, or after the other ended: already
    applied) or 4 (the other held the tree); never 2 or 3 (the other run's patches blamed as local changes, or a
    patch failing after its check)."""
    trees = (str(world.verl), str(world.trinity))
    for trial in range(3):
        runs = [_child(world, temp, *trees) for _ in range(2)]
        results = [(run.pid, run.returncode, *run.communicate(timeout=120)) for run in runs]
        codes = sorted(run.returncode for run in runs)
        assert codes in ([0, 0], [0, 4]), results
        for (_, code, _, err), (other, *_) in zip(results, reversed(results), strict=True):
            if code == 4:
                assert f"is being changed or checked by another run (pid {other}, started " in err, err
        assert tree_state(world.verl, world.trinity) == states["applied"], f"trial {trial}: {results}"
        assert _leftovers(temp, world.verl, world.trinity) == []
        assert main(world.args("--reverse", *trees)) == 0


def _git_calls(world, temp: Path, count: Path) -> int:
    code, _, err = _run(world, temp, str(world.verl), str(world.trinity), FAULT_COUNT=str(count))
    assert code == 0, err
    assert main(world.args("--reverse", str(world.verl), str(world.trinity))) == 0
    return int(count.read_text())


def test_run_killed_at_random_moments_is_repaired_by_the_next_run(world, temp, tmp_path, states, faults):
    """SIGKILL after the Nth git call, then a plain run: the trees end exactly applied, the killed run's lock and
    snapshot are gone from .git and nothing is left in the temp folder. N: three drawn (seeded) among the calls that
    find and plan the trees, and each of the last three, the ``git apply`` of each patch on the real trees (after
    the first verl patch, between the trees, after the last patch before the run ends)."""
    trees = (world.verl, world.trinity)
    total = _git_calls(world, temp, tmp_path / "count")
    for kill_at in sorted(random.Random(27).sample(range(1, total - 2), 3)) + [total - 2, total - 1, total]:
        case = f"sigkill-after-git-call-{kill_at}-of-{total}"
        code, _, _ = _run(world, temp, *map(str, trees), FAULT_KILL_AT_GIT_CALL=str(kill_at))
        assert code == -signal.SIGKILL, case

        again, out, err = _run(world, temp, *map(str, trees))

        repaired = tree_state(*trees) == states["applied"] and not _leftovers(temp, *trees)
        faults.record(case, code, intact=repaired, message=err.strip())
        assert again == 0, f"{case}: {err}"
        assert repaired, f"{case}: {_leftovers(temp, *trees)}\n{out}\n{err}"
        assert main(world.args("--reverse", *map(str, trees))) == 0


@pytest.mark.parametrize("patch", [VERL_PATCH_2, TRINITY_PATCH])
def test_run_killed_half_way_through_writing_a_patch_is_restored_then_applied(world, temp, states, faults, patch):
    """The kill lands while a patch's first file is half-written (after the verl series is in, for Trinity's
    patch): the next run restores every tree from the killed run's snapshots, says so, then applies the series."""
    trees = (world.verl, world.trinity)
    code, _, _ = _run(world, temp, *map(str, trees), FAULT_HALF_WRITE=patch)
    assert code == -signal.SIGKILL
    record = json.loads((world.verl / ".git" / "patchset" / "lock").read_text())

    again, out, err = _run(world, temp, *map(str, trees))

    repaired = tree_state(*trees) == states["applied"] and not _leftovers(temp, *trees)
    faults.record(f"sigkill-half-way-through-{patch}", code, intact=repaired, message=err.strip())
    assert again == 0, err
    assert repaired, f"{_leftovers(temp, *trees)}\n{out}\n{err}"
    assert f"taking over the lock of a run that is gone (pid {record['pid']}, started {record['started']}" in err
    assert f"{world.verl} was left half-changed by a run that was killed (pid {record['pid']}" in err
    assert "restored 2 file(s) from its snapshot" in err
    assert f"* Applying {VERL_PATCH_1} (1/2)" in out


def test_stale_lock_of_a_process_that_is_gone_is_taken_over_saying_so(world, temp, capsys):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    folder = world.verl / ".git" / "patchset"
    folder.mkdir()
    record = {"pid": gone.pid, "started": "2026-12-04T20:00:00+00:00", "command": "python -m patchset apply X"}
    (folder / "lock").write_text(json.dumps(record))

    assert main(world.args("--no-test", str(world.verl))) == 0

    err = capsys.readouterr().err
    assert f"taking over the lock of a run that is gone (pid {gone.pid}, started 2026-12-04T20:00:00" in err
    assert sorted(path.name for path in folder.iterdir()) == ["applied-verl.json"]  # the lock gone, the record kept
