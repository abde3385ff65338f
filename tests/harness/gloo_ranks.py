"""Run a computation on the ranks of a gloo process group, each a fork of the fork server, and collect what each rank
returns: the data-parallel group of the mini-batch statistics the engine worker computes before the split (verl 0004's
selection masks, 0005's IS batch mean), with real collectives.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from patchset.plumbing.children import run_children

RANKS_LIMIT_S = 120  # forks that import the module under test (if the fork server has not) and run a few collectives
# the fork server's imports (the first caller's list is the server's)
PRELOAD = ("torch", "verl.trainer.ppo.core_algos")


def _rank(rank: int, world_size: int, workdir: str, compute: Callable, module: str, module_file: str) -> None:
    """One gloo rank: ``compute(its inputs, the group)`` with the module under test imported from ``module_file``."""
    imported = importlib.import_module(module)
    assert imported.__file__ == module_file, f"the rank imported {imported.__file__}, not {module_file}"
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=world_size
    )
    inputs = torch.load(Path(workdir) / f"inputs{rank}.pt", weights_only=False)
    torch.save(compute(inputs, torch.distributed.group.WORLD), Path(workdir) / f"outputs{rank}.pt")
    torch.distributed.destroy_process_group()


def run_on_ranks(compute: Callable[[Any, Any], Any], per_rank: Sequence[Any], module: str, what: str) -> list[Any]:
    """``compute(per_rank[rank], group)`` on ``len(per_rank)`` gloo ranks, in rank order (one rank: in this process,
    with no group). ``compute`` is a module-level function (the forks import it by name); ``module`` is the upstream
    module it calls, which every rank must import from the tree this process imported it from."""
    if len(per_rank) == 1:
        return [compute(per_rank[0], None)]
    with tempfile.TemporaryDirectory(prefix="gloo-ranks-") as workdir:
        for rank, inputs in enumerate(per_rank):
            torch.save(inputs, Path(workdir) / f"inputs{rank}.pt")
        module_file = importlib.import_module(module).__file__
        ranks = [(rank, len(per_rank), workdir, compute, module, module_file) for rank in range(len(per_rank))]
        codes = run_children(_rank, ranks, RANKS_LIMIT_S, what, PRELOAD)
        assert not any(codes), f"the {what}s exited with {codes}"
        return [torch.load(Path(workdir) / f"outputs{rank}.pt") for rank in range(len(per_rank))]
