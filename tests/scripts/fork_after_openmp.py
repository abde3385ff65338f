"""The OpenMP-after-fork hang, made on purpose: ``python fork_after_openmp.py`` (with OMP_NUM_THREADS=2).

The parent runs a parallel CPU op, so torch's OpenMP pool (libgomp) has a worker thread, then starts one child whose
first op, ``repeat_interleave`` of tensors the parent made, runs in parallel too, in two ways: ``children``, from
the one place that starts children, then ``fork``, a plain fork of the parent, as the regression tests started
theirs before `patchset.plumbing.children` (whenever their process had joined no process group). Prints one JSON
line: for each way, whether the child finished within ``LIMIT_S``, and where it waited if not.
"""

from __future__ import annotations

import json
import multiprocessing

import torch

from patchset.plumbing import stacks
from patchset.plumbing.children import run_children

LIMIT_S = 3.0  # the child's op takes milliseconds; a child still in it after this waits for a thread that is gone
ROWS = 1 << 16  # over ATen's grain size (32768): the op runs in parallel
VALUES = torch.arange(ROWS)
REPEATS = torch.full((ROWS,), 3)


def repeat_interleave() -> None:
    VALUES.repeat_interleave(REPEATS)


def _fork() -> dict:
    child = multiprocessing.get_context("fork").Process(target=repeat_interleave)
    child.start()
    child.join(LIMIT_S)
    if child.exitcode is not None:
        return {"finished": child.exitcode == 0}
    stack = stacks.dump_stacks([child.pid])
    child.kill()
    child.join()
    return {"finished": False, "stack": stack}


def _children() -> dict:
    (code,) = run_children(repeat_interleave, [()], LIMIT_S, "repeat_interleave child")
    return {"finished": code == 0}


def main() -> None:
    torch.ones(ROWS * 16).sin_().sum()  # a parallel op: the OpenMP pool now has its threads
    print(json.dumps({"children": _children(), "fork": _fork()}))


if __name__ == "__main__":
    main()
