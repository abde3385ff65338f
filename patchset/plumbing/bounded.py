"""Run a command within a time limit, and when it hangs, say what hung, keep its stacks, and end it whole.

A wait without a limit turns a hang into a stall that only a person notices. Here, past ``limit_s`` seconds, the
command's whole process tree (pytest, its xdist workers, the children of a test) is looked at before it is ended:
the tests its processes were in (``patchset.plumbing.running``: the command's pytest processes write them into a
folder this module gives them) and every process's stack (``patchset.plumbing.stacks``), written to a file. Then
each process is killed and ``TimedOut`` (exit 124) says, on one line, what hung, the limit, how to raise it and
where the stacks are. An interruption (Ctrl-C) ends the tree too, as ``subprocess.run`` ends its child.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

from patchset.plumbing import stacks, tempdirs
from patchset.plumbing.errors import TimedOut
from patchset.plumbing.running import RUNNING_DIR_VARIABLE, folders_for, running_tests


@dataclass(frozen=True)
class Limit:
    """How long a run may take, and what the user sets to give it longer (named in the message of a hang)."""

    seconds: float
    raise_with: str


def hang_report(what: str, limit: Limit, root: int, running_dir: Path | None, near: Sequence[Path] = ()) -> str:
    """Look at the hung tree under ``root`` (its tests, every process's stack), end it, and return the one line that
    says so; the stacks are printed (standard error: a CI log keeps them) and kept in a file the line names."""
    pids = stacks.tree(root)
    tests = running_tests(running_dir) if running_dir is not None else []
    text = f"{what}: still running after {limit.seconds:g} s\n" + "".join(f"in test: {test}\n" for test in tests)
    text += "\n" + stacks.dump_stacks(pids, near)
    stacks.kill_all(pids)
    with tempfile.NamedTemporaryFile(
        "w", prefix="patchset-hang-", suffix=".txt", delete=False, encoding="utf-8"
    ) as report:
        report.write(text)
    print(f"=== the stacks of the hung processes (kept in {report.name})\n{text}", file=sys.stderr, flush=True)
    hung = f"{what} hung in {', '.join(tests)}" if tests else f"{what} hung"
    return (
        f"{hung}: still running after {limit.seconds:g} s, ended (to allow longer: {limit.raise_with}); the stacks of "
        f"its {len(pids)} processes are in {report.name}"
    )


class Started(Protocol):
    """What a run needs of the process it started: a `subprocess.Popen`, or another that behaves as one."""

    pid: int

    def wait(self, timeout: float | None = None) -> int: ...


# another way to start ``command`` (in ``cwd``, with ``env``, its output to ``output`` or this process's): its
# process, or None to leave it to `subprocess.Popen`
Launch = Callable[[Sequence[str], "Path | None", Mapping[str, str], "TextIO | None"], "Started | None"]


def run_bounded(
    command: Sequence[str],
    what: str,
    limit: Limit,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    output: TextIO | None = None,
    launch: Launch | None = None,
) -> int:
    """Run ``command`` and return its exit status; past ``limit`` raise ``TimedOut`` naming ``what`` (and the tests
    it was in, for a pytest run of a suite that registers ``RunningTests``), having ended its whole tree. ``output``:
    a file that takes the command's standard output and error (default: this process's). ``launch``: another way to
    start it (`patchset.testenv.suite_forks`), which may decline."""
    env = dict(os.environ if env is None else env)
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("running")) as own:
        # this run's own folder first; a waiter further up (a step of the test command) keeps seeing its tests too
        running_dir = Path(own)
        env[RUNNING_DIR_VARIABLE] = folders_for(running_dir, env.get(RUNNING_DIR_VARIABLE))
        process = launch(command, cwd, env, output) if launch is not None else None
        if process is None:
            to = {} if output is None else {"stdout": output, "stderr": subprocess.STDOUT}
            process = subprocess.Popen(list(command), cwd=cwd, env=env, **to)  # type: ignore[call-overload]
        try:
            return process.wait(timeout=limit.seconds)
        except subprocess.TimeoutExpired:
            line = hang_report(what, limit, process.pid, running_dir, near=(Path(command[0]),))
            process.wait()
            raise TimedOut(line) from None
        except BaseException:
            stacks.kill_all(stacks.tree(process.pid))
            process.wait()
            raise
