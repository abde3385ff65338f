"""Python child processes, a function each: the one place this project starts them, and waits for them.

Never a fork of the caller. A fork copies only the thread that called it: after any parallel CPU op, torch's
OpenMP pool (libgomp) has worker threads the child does not get, and the child's first parallel op
(``repeat_interleave``, a large ``arange``) waits on a barrier for them forever; the threads of a gloo process
group are lost the same way. So each child is a fork of a fork server (multiprocessing's ``forkserver``): a fresh
interpreter, started once per process, that has imported ``preload`` and computed nothing. A child then costs a
fork and what it imports beyond the preload; the server's start costs one import of the preload, once. (A fork
before any computation, as tests/overlay/warm_parent.py makes on purpose, is a fork server of its own.)

Every wait is bounded. Past the limit (``patchset.plumbing.limits``: ``PATCHSET_TIME_SCALE`` raises it) the
children's stacks are dumped and they are ended, and ``TimedOut`` names them, the limit and the stacks. A child that
fails ends the others at once: ranks of one process group would otherwise wait for it in a collective until the
limit.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import forkserver
from multiprocessing.connection import wait
from multiprocessing.context import BaseContext

from patchset.plumbing import stacks
from patchset.plumbing.errors import TimedOut
from patchset.plumbing.limits import RAISE_HINT, scaled

START_METHOD = "forkserver"


_SERVER_START = threading.Lock()


def server(preload: Sequence[str] = ("torch",)) -> BaseContext:
    """The fork server's context, its server running. ``preload`` takes effect where this process has not started its
    server yet (the first caller's list is the server's; a module it lacks, a child imports itself). The server is
    started with this process's ``sys.path`` as its ``PYTHONPATH``: Python 3.11's forkserver is handed the path but
    does not use it, so a preload module found through a path the caller added (a test folder) would not be found."""
    context = multiprocessing.get_context(START_METHOD)
    context.set_forkserver_preload(list(preload))
    with _SERVER_START:
        inherited = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(entry for entry in sys.path if entry)
        try:
            forkserver.ensure_running()  # nothing to do where it runs already
        finally:
            if inherited is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = inherited
    return context


def _end(children: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """Kill every child still running, and whatever it started, then reap them."""
    alive = [child.pid for child in children if child.pid is not None and child.is_alive()]
    stacks.kill_all(pid for root in alive for pid in stacks.tree(root))
    for child in children:
        if child.pid is not None:
            child.join()


def run_children(
    target: Callable[..., object],
    args_per_child: Sequence[tuple],
    limit_s: float,
    what: str = "child process",
    preload: Sequence[str] = ("torch",),
) -> list[int]:
    """Run ``target(*args)`` for each of ``args_per_child`` at once, each in a fork of the fork server, and return
    their exit codes. ``limit_s``: seconds on this project's machine (times ``PATCHSET_TIME_SCALE``); past it,
    ``TimedOut`` with the stack of every child still running. A child that exits non-zero ends the others."""
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
    finally:
        _end(children)
    return [child.exitcode for child in children]
