"""Python child processes, a function each: the one place this project starts them, and waits for them.

Never a fork of the caller: after any parallel op, torch's OpenMP pool (and a gloo group's threads) are missing in
the child, whose first parallel op then waits forever. Each child is a fork of a fork server that has imported
``preload`` and computed nothing. Every wait is bounded."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import connection, forkserver, resource_tracker
from multiprocessing.connection import wait
from multiprocessing.context import BaseContext

from patchset.plumbing import stacks
from patchset.plumbing.errors import TimedOut
from patchset.plumbing.limits import RAISE_HINT, scaled

START_METHOD = "forkserver"

_SERVER_START = threading.Lock()
# the write end of the pipe on which a warm server (`start_warm_server`) waits for its first caller's preload list
_warm_preload: int | None = None
# the fork server's state that `start_warm_server` sets as ``ensure_running`` would (CPython 3.8 to 3.13)
_SERVER_STATE = ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid")
_refusal: str | None = None  # why the last `start_warm_server` started no server


def warm_server_refusal() -> str | None:
    """Why this process's last `start_warm_server` started no server (None: it did, or it was never called)."""
    return _refusal


def start_warm_server(share: Sequence[str] = ()) -> bool:
    """Make this process's fork server a fork of it, now, once it has imported ``share`` and before it computes
    anything, so a child costs a fork, not a fresh interpreter importing torch and verl. False (and
    `warm_server_refusal` says why) where that is not safe; the fresh server is then started as before."""
    global _warm_preload, _refusal
    state = forkserver._forkserver
    if hasattr(state, "_forkserver_authkey") or not all(hasattr(state, name) for name in _SERVER_STATE):
        _refusal = f"Python {sys.version.split()[0]}'s fork server keeps other state"
        return False
    if _warm_preload is not None or state._forkserver_pid is not None:
        _refusal = "this process has a fork server already"
        return False
    if _refusal := _threads_problem():
        return False
    for name in share:
        with contextlib.suppress(Exception):  # the test that needs it fails on its own import, saying why
            __import__(name)
    if _refusal := _threads_problem():
        return False
    resource_tracker.ensure_running()  # started by this process, shared by its children, as ensure_running does
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()  # every client holds the write end; the server ends when the last one has gone
    preload_r, preload_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the server: never returns into the caller's code
        code = 0
        try:
            os.close(alive_w)
            os.close(preload_w)
            with os.fdopen(preload_r, "rb") as asked:
                preload = json.loads(asked.read() or b"null")
            for name in preload or ():  # None: the caller ended without starting a child
                with contextlib.suppress(ImportError):  # as a fresh server does: a child's own import says why
                    __import__(name)
            if preload is not None:
                forkserver.main(listener.fileno(), alive_r, [])
        except SystemExit:  # the way forkserver.main ends once every client has gone
            pass
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        finally:
            os._exit(code)
    os.close(alive_r)
    os.close(preload_r)
    listener.close()
    state._forkserver_address, state._forkserver_alive_fd, state._forkserver_pid = address, alive_w, pid
    _warm_preload, _refusal = preload_w, None
    return True


def _threads_problem() -> str | None:
    """Why this process is not single-threaded (a fork copies only the calling thread), else None."""
    if (count := threading.active_count()) > 1:
        return f"{count - 1} other thread(s) run in this process"
    torch = sys.modules.get("torch")
    if torch is not None and (threads := torch.get_num_threads()) != 1:
        return f"torch computes on {threads} threads (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})"
    return None


def server(preload: Sequence[str]) -> BaseContext:
    """The fork server's context, its server running; the first caller's ``preload`` is the server's."""
    global _warm_preload
    context = multiprocessing.get_context(START_METHOD)
    context.set_forkserver_preload(list(preload))
    with _SERVER_START:
        if _warm_preload is not None:
            with os.fdopen(_warm_preload, "wb") as asking:
                asking.write(json.dumps(list(preload)).encode())
            _warm_preload = None
        # Python 3.11's forkserver ignores the sys.path it is handed: without this, preload misses the caller's paths
        inherited = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(entry for entry in sys.path if entry)
        try:
            forkserver.ensure_running()  # nothing to do where it runs already
        finally:
            del os.environ["PYTHONPATH"]
            if inherited is not None:
                os.environ["PYTHONPATH"] = inherited
    return context


def run_children(
    target: Callable[..., object],
    args_per_child: Sequence[tuple],
    limit_s: float,
    what: str = "child process",
    preload: Sequence[str] = ("torch",),
) -> list[int]:
    """Run ``target(*args)`` for each of ``args_per_child`` at once and return their exit codes; past ``limit_s``
    (scaled), ``TimedOut`` with every running child's stack. A child that exits non-zero ends the others."""
    limit = scaled(limit_s)
    context = server(preload)
    children = [context.Process(target=target, args=args, name=f"{what} {n}") for n, args in enumerate(args_per_child)]
    try:
        for child in children:
            try:
                child.start()
            except (EOFError, ConnectionError) as error:  # the server died: a preload module failed to import
                raise RuntimeError(
                    f"the fork server could not start {child.name}: importing one of {list(preload)} failed in it (its "
                    f"traceback is above) ({error})"
                ) from None
        deadline = time.monotonic() + limit
        running = list(children)
        while running:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pids = [pid for child in running for pid in stacks.tree(child.pid)]
                names = ", ".join(child.name for child in running)
                raise TimedOut(
                    f"{names}: still running after {limit:g} s, ended (to allow longer: {RAISE_HINT}); their stacks:\n"
                    + stacks.dump_stacks(pids)
                )
            wait([child.sentinel for child in running], timeout=remaining)
            running = [child for child in running if child.exitcode is None]
            if any(child.exitcode for child in children if child.exitcode is not None):
                break  # one failed: the others would wait for it
    finally:  # kill every child still running, and whatever it started, then reap them
        alive = [child.pid for child in children if child.pid is not None and child.is_alive()]
        stacks.kill_all(pid for root in alive for pid in stacks.tree(root))
        for child in children:
            if child.pid is not None:
                child.join()
    return [child.exitcode for child in children]
