"""What a hung process tree is doing: its processes (``/proc``) and each one's Python and native stack (py-spy), so that
a hang explains itself; a stack that cannot be read is said so, never a failure of the report."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

_PROC = Path("/proc")
DUMP_TIMEOUT_S = 30.0  # one process's dump; py-spy takes well under a second for a live one
END_WAIT_S = 5.0  # for killed processes to be gone: the kernel takes milliseconds


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first, then the parent's pid); None: gone."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name, in parentheses, may hold spaces and parentheses itself: the fields follow the last ")"
    return stat.rpartition(")")[2].split()


def is_running(pid: int) -> bool:
    """True for a process that exists and has not ended (a zombie, not yet reaped, has)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def tree(pid: int) -> list[int]:
    """``pid`` and every live process below it (children, theirs, ...), parents before their children."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found = [pid]
    for parent in found:  # the list grows as it is walked: breadth first
        found.extend(children.get(parent, ()))
    return found


def command_line(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "(gone)"
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or "(no command line)"


def py_spy(near: Sequence[Path] = ()) -> str | None:
    """The py-spy program: beside ``near`` (a venv's python), beside this interpreter, or on PATH."""
    for python in (*near, Path(sys.executable)):
        candidate = python.parent / "py-spy"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("py-spy")


def _stack(pid: int, program: str | None) -> str:
    if program is None:
        return "(no stack: py-spy was not found; it is in requirements/lock.txt)"
    for flags in (["--native"], []):  # native frames where py-spy can read them, else the Python stack alone
        try:
            result = subprocess.run(
                [program, "dump", *flags, "--pid", str(pid)], capture_output=True, text=True, timeout=DUMP_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            continue
        if result.returncode == 0:
            return result.stdout.rstrip()
    return "(no stack: py-spy could not read this process; it may not be a Python process, or ptrace is refused)"


def dump_stacks(pids: Iterable[int], near: Sequence[Path] = ()) -> str:
    """Each process of ``pids`` with its command line and stack, as one text."""
    program = py_spy(near)
    parts = [f"--- process {pid}: {command_line(pid)}\n{_stack(pid, program)}" for pid in pids]
    return "\n\n".join(parts) + "\n"


def kill_all(pids: Iterable[int]) -> None:
    """End each of ``pids``, all stopped first so that none runs on when another ends (a test whose child is killed
    would go on to its teardown); return once none runs (or after ``END_WAIT_S`` seconds)."""
    pids = list(pids)
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
    deadline = time.monotonic() + END_WAIT_S
    while any(is_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
