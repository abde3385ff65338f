"""Fault injection: a run interrupted by SIGINT, SIGTERM or SIGHUP leaves every tree exactly as it was.

The CLI runs as a child process (``python -c HOOK``) with one step slowed down by the hook: it pauses after
printing a progress line (between two patches, between two trees), or inside the ``git apply`` of a patch on the
real tree until the signal has been sent (a critical section: the signal must wait until the patch is written,
and then roll it back). The test waits
for the hook's marker file, sends the signal, and checks the exit status (128 + the signal), the one error line,
and that ``tree_state`` of every tree is what it was before the run. Each case is recorded in the fault registry.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from patchset_fakes import DEPENDENT_PATCH, REPO_ROOT, tree_state

from patchset.series.model import load_series

VERL_PATCH = "0001-trainer-critic-value-loss-global-normalization.patch"
TRINITY_PATCH = "0001-trainer-policy-loss-global-normalization.patch"

HOOK = r"""
import os, sys, time
from pathlib import Path
from patchset.plumbing import gitops
from patchset.cli import main
from patchset.plumbing.ui import Console

marker, pause_on = Path(os.environ["FAULT_MARKER"]), os.environ["FAULT_PAUSE_ON"]
if os.environ.get("FAULT_IN_APPLY_OF"):  # pause inside git apply on the real tree, after it wrote the patch
    real, tree = gitops.apply_patch, Path(os.environ["FAULT_IN_APPLY_OF"]).resolve()
    def apply_patch(cwd, patch, *, reverse=False, check=False, directory=""):
        result = real(cwd, patch, reverse=reverse, check=check, directory=directory)
        if not check and patch.name == pause_on and Path(cwd).resolve() == tree:
            marker.write_text("in git apply")
            go = marker.with_name("signal-sent")
            for _ in range(3000):  # until the test has sent its signal (which must wait for this step)
                if go.exists():
                    break
                time.sleep(0.02)
        return result
    gitops.apply_patch = apply_patch
else:  # pause after printing the progress line that starts with pause_on
    real_step = Console.step
    def step(self, message):
        real_step(self, message)
        if message.startswith(pause_on):
            marker.write_text(message)
            # short sleeps: a signal that lands inside time.sleep before its system call (the handler not run yet)
            # interrupts nothing, and a single 60 s sleep then outlasted the test's 60 s wait (twice on 2026-12-07)
            for _ in range(3000):
                time.sleep(0.02)
    Console.step = step
raise SystemExit(main(sys.argv[1:]))
"""


def _interrupt(tmp_path: Path, argv: list[str], signum: int, pause_on: str, in_apply_of: Path | None = None):
    marker = tmp_path / "paused"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FAULT_MARKER": str(marker), "FAULT_PAUSE_ON": pause_on}
    if in_apply_of is not None:
        env["FAULT_IN_APPLY_OF"] = str(in_apply_of)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOOK, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    if not marker.exists():
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the run never reached {pause_on!r}:\n{out}\n{err}")
    proc.send_signal(signum)
    (tmp_path / "signal-sent").touch()
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


@pytest.mark.parametrize(
    ("case", "signum", "where"),
    [
        ("sigterm-between-two-trees", signal.SIGTERM, "between-trees"),
        ("sigint-between-two-patches", signal.SIGINT, "between-patches"),
        ("sigterm-inside-git-apply", signal.SIGTERM, "in-git-apply"),
        ("sighup-before-the-first-patch", signal.SIGHUP, "before-first"),
    ],
)
def test_interrupted_run_restores_every_tree(pinned, fake_series, tmp_path, faults, case, signum, where):
    verl = pinned("verl")
    trees, patches, in_apply_of, applied = [verl], [], None, 1
    if where == "between-trees":  # the verl series is in, Trinity's first patch is next
        trinity = pinned("trinity")
        trees.append(trinity)
        pause_on = f"Applying {TRINITY_PATCH}"
        applied = len(load_series(REPO_ROOT / "patches", "verl").patches)
    elif where == "between-patches":  # 0001 is in, 0002 is next
        patches = ["--patches-dir", str(fake_series["dependent"])]
        pause_on = f"Applying {DEPENDENT_PATCH}"
    elif where == "in-git-apply":  # the signal arrives while git apply writes the patch
        pause_on, in_apply_of = VERL_PATCH, verl
    else:
        pause_on, applied = f"Applying {VERL_PATCH}", 0
    before = tree_state(*trees)

    code, out, err = _interrupt(
        tmp_path, ["apply", "--no-test", *patches, *map(str, trees)], signum, pause_on, in_apply_of
    )

    intact = tree_state(*trees) == before
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    faults.record(case, code, intact=intact, message=errors[-1] if errors else err.strip())
    assert code != 0, f"silent success:\n{out}"
    assert code == 128 + signum, err
    assert intact
    name = signal.Signals(signum).name
    if applied:
        assert errors == [
            f"error: interrupted by {name}; the {applied} patch(es) applied in this run were rolled back and every "
            "tree is as it was found"
        ]
        assert f"* Rolling back {VERL_PATCH}" in out
    else:
        assert errors == [f"error: interrupted by {name}; nothing was changed"]


def test_output_closed_mid_run_rolls_back_like_a_signal(pinned, tmp_path, faults):
    """``scripts/apply.sh ... | head -2``: the reader stops reading while the first patch is written; the next
    progress line cannot be written, and the run ends as SIGPIPE ends a command: rolled back, exit 141, one line."""
    verl = pinned("verl")
    before = tree_state(verl)
    marker = tmp_path / "paused"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "FAULT_MARKER": str(marker), "FAULT_PAUSE_ON": VERL_PATCH}
    env["FAULT_IN_APPLY_OF"] = str(verl)
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOOK, "apply", "--no-test", str(verl)],
        env=env,
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)
    deadline = time.monotonic() + 60
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.close(read_end)  # the reader is gone before the next line
    (tmp_path / "signal-sent").touch()
    err = proc.communicate(timeout=60)[1]

    intact = tree_state(verl) == before
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    faults.record("stdout-closed-inside-git-apply", proc.returncode, intact=intact, message=" ".join(errors))
    assert marker.exists(), err
    assert proc.returncode == 128 + signal.SIGPIPE, err
    assert intact
    assert errors == [
        "error: interrupted by SIGPIPE; the 1 patch(es) applied in this run were rolled back and every tree is as it "
        "was found"
    ]
    assert "Traceback" not in err and "Exception ignored" not in err
