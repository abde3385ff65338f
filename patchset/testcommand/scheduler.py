"""Run the steps of the test command, several at once where they are independent, each timed and reported whole.

A step is a child process. With more than one job its output goes to a log printed in one piece when it ends (unless
it is a ``stream`` step), and a line every ``progress_every`` seconds says what runs. A step waits for the steps it
comes ``after``, and is not run when a step it ``needs`` failed. Past its ``limit_s`` (times
``PATCHSET_TIME_SCALE``) a step's tests and stacks are printed, its tree ended, and it fails (``timed_out``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from patchset.plumbing.bounded import RUNNING_DIR_VARIABLE, Limit, folders_for, hang_report
from patchset.plumbing.limits import RAISE_HINT, scaled


@dataclass(frozen=True)
class Step:
    name: str
    proves: str
    argv: tuple[str, ...]
    needs: tuple[str, ...] = ()  # must have passed
    after: tuple[str, ...] = ()  # must have ended (what they write is read), passed or not
    stream: bool = False
    env: tuple[tuple[str, str], ...] = ()  # set for this step only, over the scheduler's environment
    limit_s: float = 1200.0  # on this project's 2-core machine, well above what the step takes there


@dataclass
class StepResult:
    name: str
    proves: str
    passed: bool
    seconds: float
    note: str = ""
    timed_out: bool = False
    cpu_seconds: float | None = None  # of the step's process and the processes it waited for (None: not reaped here)


@dataclass
class _Running:
    step: Step
    process: subprocess.Popen[bytes]
    started: float
    running_dir: Path  # where its pytest processes name the test they are in
    limit: Limit  # the step's, scaled when it started
    log: BinaryIO | None = None  # where its output goes, printed when it ends (None: the step streams)
    cpu_seconds: float | None = None


def _reap(running: _Running) -> bool:
    """Whether the step's process has ended; if so, its exit status and the CPU time of it and the processes it
    waited for (``wait4``)."""
    process = running.process
    pid, status, usage = os.wait4(process.pid, os.WNOHANG)
    if pid == 0:
        return False
    process.returncode = os.waitstatus_to_exitcode(status)
    running.cpu_seconds = usage.ru_utime + usage.ru_stime
    return True


def duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


class Scheduler:
    """Runs ``steps`` in their order, up to ``jobs`` at a time; ``run`` returns a result per step, in that order."""

    def __init__(
        self,
        steps: Sequence[Step],
        jobs: int,
        cwd: Path,
        env: Mapping[str, str],
        out: TextIO = sys.stdout,
        progress_every: float = 30.0,
        before_start: Callable[[Step], None] | None = None,
    ) -> None:
        names = [step.name for step in steps]
        for step in steps:
            unknown = set(step.needs + step.after) - set(names[: names.index(step.name)])
            if unknown:
                raise ValueError(f"step {step.name!r} waits for {sorted(unknown)}, which are not earlier steps")
        self.steps, self.jobs, self.cwd, self.env = list(steps), max(1, jobs), cwd, dict(env)
        self.out, self.progress_every, self.before_start = out, progress_every, before_start
        self.results: dict[str, StepResult] = {}

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _start(self, step: Step, logs: Path) -> _Running:
        if self.before_start is not None:  # what the step uses that the scheduler keeps (the suite fork server)
            self.before_start(step)
        streamed = self.jobs == 1 or step.stream
        self._say(f"\n=== {step.name}: {step.proves}" + ("" if streamed else " (started)"))
        slug = f"{len(self.results) + 1:02d}-{step.name.replace(' ', '-').replace('/', '-')}"
        running_dir = logs / f"{slug}.running"
        running_dir.mkdir()
        env = {**self.env, **dict(step.env)}
        env[RUNNING_DIR_VARIABLE] = folders_for(running_dir, env.get(RUNNING_DIR_VARIABLE))
        limit = Limit(scaled(step.limit_s), RAISE_HINT)
        log = None if streamed else (logs / f"{slug}.log").open("wb")
        errors = subprocess.STDOUT if log else None
        process = subprocess.Popen(step.argv, cwd=self.cwd, env=env, stdout=log, stderr=errors)
        return _Running(step, process, time.monotonic(), running_dir, limit, log)

    def _end_hung(self, running: _Running) -> None:
        """The step is past its limit: print what it was in and its stacks, end its tree, and fail it saying so."""
        line = hang_report(f"step {running.step.name!r}", running.limit, running.process.pid, running.running_dir)
        running.process.wait()
        self._finish(running, note=line)

    def _finish(self, running: _Running, note: str = "") -> None:
        seconds = time.monotonic() - running.started
        passed = running.process.returncode == 0 and not note
        step = running.step
        if running.log is not None:
            running.log.close()
            self._say(f"\n=== {step.name}: {step.proves}")
            self.out.write(Path(running.log.name).read_text(encoding="utf-8", errors="replace"))
        ending = f": {note}" if note else ""
        self._say(f"=== {step.name}: {'ok' if passed else 'FAILED'} in {duration(seconds)}{ending}")
        self.results[step.name] = StepResult(
            step.name, step.proves, passed, seconds, note, timed_out=bool(note), cpu_seconds=running.cpu_seconds
        )

    def run(self) -> list[StepResult]:
        waiting = list(self.steps)
        running: list[_Running] = []
        last_progress = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="patchset-steps-") as tmp:
            try:
                while waiting or running:
                    ready = [step for step in waiting if all(name in self.results for name in step.needs + step.after)]
                    for step in ready:
                        if blocked := [name for name in step.needs if not self.results[name].passed]:
                            waiting.remove(step)
                            note = f"not run: {', '.join(blocked)} failed"
                            self._say(f"\n=== {step.name}: {note}")
                            self.results[step.name] = StepResult(step.name, step.proves, False, 0.0, note)
                        elif len(running) < self.jobs:
                            waiting.remove(step)
                            running.append(self._start(step, Path(tmp)))
                    if not running:
                        continue
                    time.sleep(0.2)
                    for entry in [entry for entry in running if _reap(entry)]:
                        running.remove(entry)
                        self._finish(entry)
                        last_progress = time.monotonic()
                    for entry in [e for e in running if time.monotonic() - e.started > e.limit.seconds]:
                        running.remove(entry)
                        self._end_hung(entry)
                    if self.jobs > 1 and running and time.monotonic() - last_progress >= self.progress_every:
                        now = time.monotonic()
                        what = ", ".join(f"{entry.step.name} ({duration(now - entry.started)})" for entry in running)
                        self._say(f"... running: {what}")
                        last_progress = now
            finally:  # interrupted: no step is left running behind the user's back
                for entry in running:
                    entry.process.terminate()
                for entry in running:
                    entry.process.wait()
        return [self.results[step.name] for step in self.steps]


def _cpu(result: StepResult) -> str:
    return duration(result.cpu_seconds) if result.cpu_seconds is not None else "-"


def summary(results: Sequence[StepResult], total_seconds: float, jobs: int, cpu_seconds: float) -> str:
    """A line per step: passed or not, its wall time, the CPU time of its processes, its name and what it proves;
    then the total, and the CPU time of the whole run."""
    width = max(len(result.name) for result in results)
    lines = [f"  {'':4} {'wall':>7} {'cpu':>7}  {'step':<{width}}"]
    lines += [
        f"  {'ok  ' if result.passed else 'FAIL'} {duration(result.seconds):>7} {_cpu(result):>7}  "
        f"{result.name:<{width}}  {result.note or result.proves}"
        for result in results
    ]
    total = f"  total {duration(total_seconds)}, {duration(cpu_seconds)} of CPU (up to {jobs} steps at a time)"
    return "\n".join([*lines, total])
