"""The fork server of the regression suite's runs, one per test command (`patchset.testenv.suite_forks` is the client).

``python -P -m patchset.testenv.suite_fork_server SOCKET OWNER LIST TREE... -- MODULE...``, with the pinned venv's
python. It learns, in a throwaway fork with the ``TREE`` folders first on ``sys.path``, what importing each ``MODULE``
loads (or reads it from ``LIST``, written by an earlier server), imports all of it but `OWNED` modules and the pytest
plugins', and freezes it (``gc.freeze``). Each request is a fork that becomes ``python -m MODULE ARGS`` as a fresh
interpreter would (the run's environment, folder, ``sys.path`` and streams); the server answers its pid, then its
exit status. A run asking for other `THREAD_VARIABLES` is declined (torch read them here). It serves until ``OWNER``
ends.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import importlib.metadata
import json
import os
import runpy
import select
import socket
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

# modules a run imports itself: the trees', this project's and the suite's helpers, and what Hydra's config
# composition imports first
OWNED = ("verl", "trinity", "engine_harness", "patchset", "hydra", "hydra_plugins", "omegaconf")
OWNED += ("verl_overlay", "trinity_overlay", "patchset_overlay", "patchset_overlay_registry")
REQUEST_BYTES = 1 << 20  # one request: its argv, folder and environment, as JSON
# read once, as torch (OpenMP, MKL) is imported: a run that asks for other values than the server's is declined, since
# a fork would compute on the server's threads (and, with more than one, could not fork ranks from itself)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _pytest_plugins() -> set[str]:
    """The top-level modules of the pytest plugins installed (``pytest11`` entry points): pytest rewrites a plugin's
    asserts as it imports it, which it cannot do to a module imported already (it warns)."""
    return {entry.value.split(":")[0].split(".")[0] for entry in importlib.metadata.entry_points(group="pytest11")}


def modules_loaded_by(trees: Sequence[str], targets: Sequence[str]) -> list[str]:
    """The modules importing ``targets`` (from ``trees`` first on the path) loads, in import order, learned in a child
    that is then thrown away; a target that fails to import adds what it loaded before it failed (the runs import what
    they need themselves, and say why one fails)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        names: list[str] = []
        try:
            sys.path[0:0] = list(trees)
            for name in targets:
                with contextlib.suppress(Exception):
                    importlib.import_module(name)
            names = list(sys.modules)
        finally:
            with os.fdopen(write_end, "w") as stream:
                stream.write("\n".join(names))
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as stream:
        loaded = [name for name in stream.read().split("\n") if name]
    os.waitpid(pid, 0)
    return loaded


def module_list(path: Path, trees: Sequence[str], targets: Sequence[str]) -> list[str]:
    """The modules importing ``targets`` loads: from ``path`` if an earlier server wrote it, else learned now and
    written there (whole or not at all; not where the probe learned nothing, which the next server learns again)."""
    if path.is_file():
        return path.read_text(encoding="utf-8").split("\n")
    names = modules_loaded_by(trees, targets)
    if not names:
        return names
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text("\n".join(names), encoding="utf-8")
    partial.replace(path)
    return names


def preload(names: Sequence[str]) -> int:
    """Import each of ``names`` that is not `OWNED` or a pytest plugin's (in that order); how many modules that
    added."""
    before, left_out = len(sys.modules), {*OWNED, *_pytest_plugins()}
    for name in (name for name in names if name.split(".", 1)[0] not in left_out and name != "__main__"):
        with contextlib.suppress(Exception):  # aliases and private extension parts cannot be imported by name
            importlib.import_module(name)
    return len(sys.modules) - before


def _become(request: dict, streams: Sequence[int], base_path: Sequence[str]) -> None:
    """In the forked child: become ``python -m MODULE ARGS`` started in the request's folder with its environment and
    streams; never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, stream in zip((1, 2), streams, strict=True):
            os.dup2(stream, fd)
        for fd in (null, *streams):
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # what a fresh interpreter reads from these at start-up: whether and where it writes bytecode
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or None
        pythonpath = [entry for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep) if entry]
        sys.path[:] = [os.getcwd(), *pythonpath, *base_path]
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int | None):
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported as a fresh interpreter reports it
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # as a fresh interpreter does on its way out
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def declined(request: dict, threads: dict[str, str | None]) -> str | None:
    """Why the server does not fork ``request``: it asks for other `THREAD_VARIABLES` than ``threads``, the server's
    own (None: it forks it)."""
    asked = {name: request["env"].get(name) for name in THREAD_VARIABLES}
    differ = [name for name in THREAD_VARIABLES if asked[name] != threads[name]]
    said = [f"the run asks for {name}={asked[name]}, the server has {threads[name]}" for name in differ]
    return ", ".join(said) or None


def _request(listener: socket.socket, threads: dict[str, str | None]) -> tuple[socket.socket, dict, list[int]] | None:
    """The next request on ``listener``: its connection, the request and the streams sent with it; None where there is
    nothing to fork: a client gone before it asked (its request empty or cut short), or one `declined` (told why)."""
    connection, _ = listener.accept()
    streams: list[int] = []
    try:
        message, streams, _, _ = socket.recv_fds(connection, REQUEST_BYTES, 2)
        request = json.loads(message)
        why = declined(request, threads)
        if why is None and len(streams) == 2:
            return connection, request, streams
        connection.sendall(json.dumps({"declined": why or "no output streams were sent"}).encode())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    for stream in streams:
        os.close(stream)
    connection.close()
    return None


def serve(listener: socket.socket, owner: int, base_path: Sequence[str]) -> None:
    """Fork a run for each request on ``listener``, answer its pid, then its exit status; return once ``owner`` has
    ended. A request whose thread settings are not the server's (`declined`) is answered why, and not forked. No
    thread: a fork copies only the thread that calls it."""
    threads = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    poller = select.poll()
    try:
        owner_fd = os.pidfd_open(owner)
    except ProcessLookupError:  # it ended while this imported
        return
    poller.register(owner_fd, select.POLLIN)
    poller.register(listener, select.POLLIN)
    runs: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the connection that asked for it)
    while True:
        for fd, _ in poller.poll():
            if fd == owner_fd:
                return
            if fd == listener.fileno():
                if (asked := _request(listener, threads)) is None:
                    continue
                connection, request, streams = asked
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    for pidfd, (_, other) in runs.items():
                        os.close(pidfd)
                        other.close()
                    os.close(owner_fd)
                    connection.close()
                    _become(request, streams, base_path)
                for stream in streams:
                    os.close(stream)
                with contextlib.suppress(OSError):  # a client gone by now: its run is reaped all the same
                    connection.sendall(json.dumps({"pid": pid}).encode())
                pidfd = os.pidfd_open(pid)
                runs[pidfd] = (pid, connection)
                poller.register(pidfd, select.POLLIN)
            elif fd in runs:
                pid, connection = runs.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):  # the client has gone (interrupted): nothing to tell
                    connection.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
                connection.close()


def main(argv: Sequence[str]) -> int:
    address, owner, listed, rest = argv[0], int(argv[1]), Path(argv[2]), list(argv[3:])
    split = rest.index("--")
    trees, targets = rest[:split], rest[split + 1 :]
    pythonpath = {entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry}
    base_path = [entry for entry in sys.path if entry and entry not in pythonpath]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(address)
    try:
        # listening at once: a run that connects while this imports waits in the queue, and learns of a server
        # that died on the way from its connection, not from a limit
        listener.bind(address)
        listener.listen(64)
        imported = preload(module_list(listed, trees, targets))
        gc.collect()
        gc.freeze()  # what every run inherits, out of the collector's view: no run walks it, or writes to its pages
        print(f"suite fork server: {imported} modules preloaded, serving on {address}", file=sys.stderr, flush=True)
        serve(listener, owner, base_path)
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
