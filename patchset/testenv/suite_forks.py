"""The client of the suite fork server (`patchset.testenv.suite_fork_server`): `launcher` lets `run_bounded` start
``python -m MODULE ...`` of the pinned venv (the suite's pytest, upstream's tests, ``patchset doctor``) as a fork of
the server named in ``SOCKET_VARIABLE`` (set by the test command), without importing torch and the rest again (about
100 CPU-s a test command: docs/testing.md); elsewhere, a fresh interpreter.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from patchset.plumbing import stacks
from patchset.plumbing.bounded import Launch
from patchset.plumbing.limits import scaled
from patchset.testenv.venv import ensure_venv

SOCKET_VARIABLE = "PATCHSET_SUITE_FORKS"
SOCKET_LIMIT_S = 30  # the server makes its socket as it starts (the test command starts it before the step)
READY_LIMIT_S = 300  # then learns and imports what the runs import (about 10 s of CPU) before it forks the first


class ForkedRun:
    """A run forked by the suite fork server: what `run_bounded` needs of a `subprocess.Popen`."""

    def __init__(self, connection: socket.socket, command: Sequence[str], pid: int) -> None:
        self.connection, self.args, self.pid = connection, list(command), pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        self.connection.settimeout(timeout)
        try:
            answer = self.connection.recv(4096)
        except TimeoutError:
            raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        self.connection.close()
        if not answer:  # the server ended while the run went on: its status is lost, and the run is ended with it
            print(f"* the suite fork server ended during the run (pid {self.pid}), which is ended: exit 1", flush=True)
            stacks.kill_all(stacks.tree(self.pid))
        self.returncode = int(json.loads(answer)["returncode"]) if answer else 1
        return self.returncode


def _connect(address: str, limit_s: float) -> socket.socket | None:
    """A connection to the server at ``address``, waiting for it to come up for ``limit_s`` at most."""
    deadline = time.monotonic() + limit_s
    while True:
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            connection.connect(address)
            return connection
        except OSError:
            connection.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)


def module_list_name(lock: Path, modules: Sequence[str]) -> str:
    """The file name of the list of modules a server learned: by the locked environment and the modules imported."""
    digest = hashlib.sha256(lock.read_bytes() + "\n".join(modules).encode() + sys.version.encode()).hexdigest()
    return f"modules-{digest[:16]}.txt"


def launcher(python: Path, environ: Mapping[str, str] | None = None) -> Launch | None:
    """How to start ``python -m MODULE ...`` as a fork of the suite fork server named in ``SOCKET_VARIABLE`` (None
    where none is named). The launch returns None, leaving the run to a fresh interpreter, for another command or
    where the server cannot be reached. A fork skips the interpreter's start-up (``.pth`` files, sitecustomize): not
    for a run that tests it."""
    address = (os.environ if environ is None else environ).get(SOCKET_VARIABLE)
    if not address:
        return None

    def launch(
        command: Sequence[str],
        cwd: Path | None,
        env: Mapping[str, str],
        output: TextIO | None,
        errors: TextIO | None = None,
    ) -> ForkedRun | None:
        if len(command) < 3 or list(command[:2]) != [str(python), "-m"]:
            return None
        connection = _connect(address, scaled(SOCKET_LIMIT_S))
        if connection is None:
            return _fresh(address, "it did not answer")
        answer = _started(connection, command, cwd, env, output, errors)
        if isinstance(answer, str):
            connection.close()
            return _fresh(address, answer)
        return ForkedRun(connection, command, answer)

    return launch


def run_captured(
    command: Sequence[str],
    cwd: Path,
    env: Mapping[str, str],
    errors_apart: bool = False,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``command`` (``python -m MODULE ...`` of the pinned venv, or any other) reading nothing, its output and errors
    together (``errors_apart``: in ``stderr``): a fork of the suite fork server where ``env`` names one, else a fresh
    process."""
    launch = launcher(ensure_venv(), env) if env.get(SOCKET_VARIABLE) else None
    with tempfile.TemporaryFile("w+") as output, tempfile.TemporaryFile("w+") as errors:
        run = launch(command, cwd, env, output, errors if errors_apart else None) if launch else None
        if run is None:
            streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE}
            streams["stderr"] = subprocess.PIPE if errors_apart else subprocess.STDOUT
            return subprocess.run(list(command), cwd=cwd, env=env, text=True, check=False, timeout=timeout, **streams)  # type: ignore[call-overload]
        code = run.wait(timeout)
        output.seek(0)
        errors.seek(0)
        return subprocess.CompletedProcess(list(command), code, output.read(), errors.read() if errors_apart else None)


def _fresh(address: str, why: str) -> None:
    """Say why the server at ``address`` does not fork a run, which a fresh interpreter then runs."""
    print(f"* the suite fork server at {address}: {why}; a fresh interpreter runs it", flush=True)


def _started(
    connection: socket.socket,
    command: Sequence[str],
    cwd: Path | None,
    env: Mapping[str, str],
    output: TextIO | None,
    errors: TextIO | None,
) -> int | str:
    """Ask the server on ``connection`` to fork ``command``, its standard output to ``output`` and its errors to
    ``errors`` (default: ``output``); the run's pid, or why not: the server declined it (its thread settings differ),
    ended, or did not answer within `READY_LIMIT_S`."""
    # where no output is given, the run writes where a fresh interpreter would: to file descriptors 1 and 2, whatever
    # sys.stdout is here (pytest's capture has no file descriptor)
    errors = errors or output
    streams = [output.fileno() if output else 1, errors.fileno() if errors else 2]
    request = {"module": command[2], "argv": list(command[3:]), "cwd": str(cwd or os.getcwd()), "env": dict(env)}
    for stream in (sys.stdout, sys.stderr, output, errors):
        if stream is not None:
            stream.flush()
    connection.settimeout(scaled(READY_LIMIT_S))
    try:
        socket.send_fds(connection, [json.dumps(request).encode()], streams)
        answer = json.loads(connection.recv(4096))
    except (OSError, ValueError):  # reset, refused, timed out, or closed with nothing said
        return "it did not answer"
    if "declined" in answer:
        return f"declined ({answer['declined']})"
    return int(answer["pid"]) if "pid" in answer else "it did not answer"


class SuiteForkServer:
    """The test command's suite fork server: started on first use (`start`), with the pinned venv's ``python`` and
    the ``trees`` and ``modules`` it learns its imports from, kept in ``listed`` for the next run (named by what it
    depends on: `module_list_name`); it ends with the process that started it, or `stop`."""

    def __init__(self, address: str, trees: Sequence[Path], modules: Sequence[str], listed: Path, log: Path) -> None:
        self.address, self.trees, self.modules, self.listed, self.log = address, list(trees), list(modules), listed, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, python: Path, repo_root: Path, environ: Mapping[str, str]) -> None:
        """Start the server, in ``environ``: that of the runs it is to fork, whose thread settings it must share
        (`suite_fork_server.THREAD_VARIABLES`)."""
        if self.process is not None:
            return
        command = [str(python), "-P", "-m", "patchset.testenv.suite_fork_server", self.address, str(os.getpid())]
        command += [str(self.listed), *(str(tree) for tree in self.trees), "--", *self.modules]
        env = {**environ, "PYTHONPATH": str(repo_root)}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)

    def stop(self) -> float | None:
        """End the server; the CPU seconds it and the runs it forked used (None: it was never started)."""
        cpu = None
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):  # not Popen.terminate, which reaps a server that died
                os.kill(self.process.pid, signal.SIGTERM)
            _, _, usage = os.wait4(self.process.pid, 0)
            self.process.returncode = 0
            cpu = usage.ru_utime + usage.ru_stime
            self.process = None
        if os.path.exists(self.address):
            os.unlink(self.address)
        return cpu
