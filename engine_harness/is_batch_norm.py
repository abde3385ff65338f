"""Bypass mode's IS batch normalization where verl's engine worker computes it: on each rank's mini-batch, before the
split.

Where the tree has ``compute_rollout_is_batch_mean`` (verl 0005), the worker's ``train_batch`` calls it once per
mini-batch with the data-parallel group and puts the mean in the batch (``rollout_is_batch_mean``, one copy a row),
which the engine splits with the rest. `worker_batch_means` does the same for the ranks that `engine_harness.sim`
deals the batch to: at dp 1 in this process (no group), at dp 2 in two gloo processes (forks of the fork server, as
`engine_harness.cov_selection`'s), so that the function's all-reduce is a real collective. Where the tree lacks the
function (vanilla), it returns None, and the loss takes each micro-batch's own mean as upstream does.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from engine_harness.cov_selection import SELECTION_MODULE as PRELOADED
from patchset.plumbing.children import run_children

RANKS_LIMIT_S = 120  # two forks that import verl's rollout_corr_helper (if the fork server has not) and all-reduce
MEAN_MODULE = "verl.trainer.ppo.rollout_corr_helper"
FUNCTION = "compute_rollout_is_batch_mean"


def has_mini_batch_mean() -> bool:
    """Whether the verl tree under test normalizes bypass mode's IS weights by the mini-batch's mean (verl 0005)."""
    return hasattr(importlib.import_module(MEAN_MODULE), FUNCTION)


def _mean(inputs: dict, dp_group) -> torch.Tensor:
    """The real function on one rank's rows."""
    return getattr(importlib.import_module(MEAN_MODULE), FUNCTION)(**inputs, dp_group=dp_group)


def _rank_means(rank: int, world_size: int, workdir: str, module_file: str) -> None:
    """One gloo rank: its rows' means, one per request, from the real function with the data-parallel group."""
    module = importlib.import_module(MEAN_MODULE)
    assert module.__file__ == module_file, f"the rank imported {module.__file__}, not {module_file}"
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=world_size
    )
    requests = torch.load(Path(workdir) / f"inputs{rank}.pt", weights_only=False)
    means = {key: _mean(inputs, torch.distributed.group.WORLD) for key, inputs in requests.items()}
    torch.save(means, Path(workdir) / f"means{rank}.pt")
    torch.distributed.destroy_process_group()


def worker_batch_means(requests: dict, dp_size: int) -> dict[str, torch.Tensor] | None:
    """{key: the mean each row carries}, for ``requests`` {key: the keyword arguments of
    ``compute_rollout_is_batch_mean`` for the whole mini-batch (``log_prob``, ``rollout_log_prob``,
    ``response_mask``, ``rollout_is``, ``rollout_is_threshold``)}, the rows dealt to ``dp_size`` ranks in contiguous
    blocks (as `engine_harness.sim.engine_gradient` deals them): one value a row; None on a vanilla tree. At dp 2 one
    pair of gloo ranks computes every request's."""
    if not has_mini_batch_mean():
        return None
    num_rows = len(next(iter(requests.values()))["log_prob"])
    rank_rows = torch.arange(num_rows).chunk(dp_size)
    per_rank = [
        {
            key: {name: value[rows] if isinstance(value, torch.Tensor) else value for name, value in inputs.items()}
            for key, inputs in requests.items()
        }
        for rows in rank_rows
    ]
    if dp_size == 1:
        results = [{key: _mean(inputs, None) for key, inputs in per_rank[0].items()}]
    else:
        with tempfile.TemporaryDirectory(prefix="is-batch-mean-ranks-") as workdir:
            for rank, rank_requests in enumerate(per_rank):
                torch.save(rank_requests, Path(workdir) / f"inputs{rank}.pt")
            module_file = importlib.import_module(MEAN_MODULE).__file__
            ranks = [(rank, dp_size, workdir, module_file) for rank in range(dp_size)]
            codes = run_children(_rank_means, ranks, RANKS_LIMIT_S, "IS batch mean rank", ("torch", PRELOADED))
            assert not any(codes), f"the IS batch mean's ranks exited with {codes}"
            results = [torch.load(Path(workdir) / f"means{rank}.pt") for rank in range(dp_size)]
    return {
        key: torch.cat([result[key].expand(len(rows)) for result, rows in zip(results, rank_rows, strict=True)])
        for key in requests
    }
