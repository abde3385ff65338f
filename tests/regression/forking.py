"""Child processes for tests that fork from the test process, which has imported torch, verl and Trinity already.

A fork copies the parent's memory but only the thread that forked: a process group the parent has joined (gloo
keeps threads and locks) is a copy whose threads are gone, and a child that touches torch.distributed can wait on a
lock no thread will ever release. So a test forks only while this process has joined no process group (conftest runs
the forking modules first), and otherwise starts its children from a fork server, which imports what it needs once.
Either way the children are daemons, waited for until a deadline and killed past it: a stuck child fails the test
and never holds this process at its exit.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from multiprocessing.context import BaseContext

# the modules that fork from the test process (conftest runs them first in their worker)
FORKING_MODULES = (
    "test_gpu_proof_smoke.py",
    "test_trinity_legacy_data_parallel.py",
    "test_trinity_legacy_sequence_parallel.py",
)


def safe_context(preload: Sequence[str] = ("torch",)) -> BaseContext:
    """``fork`` while this process has joined no process group, else a fork server that imports ``preload``."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    return context


def run_children(
    target: Callable[..., None],
    args_per_child: Sequence[tuple],
    deadline_s: float,
    context: BaseContext | None = None,
) -> list[int | None]:
    """Run ``target(*args)`` for each of ``args_per_child`` at once (in ``context``, default `safe_context`); each
    child's exit code, or None for one still running after ``deadline_s`` seconds (killed)."""
    context = context or safe_context()
    children = [context.Process(target=target, args=args, daemon=True) for args in args_per_child]
    for child in children:
        child.start()
    deadline = time.monotonic() + deadline_s
    for child in children:
        child.join(timeout=max(0.0, deadline - time.monotonic()))
    codes: list[int | None] = []
    for child in children:
        if child.is_alive():
            child.kill()
            child.join()
            codes.append(None)
        else:
            codes.append(child.exitcode)
    return codes
