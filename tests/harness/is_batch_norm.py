"""Bypass mode's IS batch mean where verl's engine worker computes it (verl 0005, ``compute_rollout_is_batch_mean``):
once per rank's mini-batch, before the split, with the data-parallel group; at dp 2 on two gloo ranks
(`gloo_ranks`), so that the all-reduce is real. A vanilla tree has no such function: its loss takes
each micro-batch's own mean.
"""

from __future__ import annotations

import importlib

import torch

from .gloo_ranks import run_on_ranks

MEAN_MODULE = "verl.trainer.ppo.rollout_corr_helper"
FUNCTION = "compute_rollout_is_batch_mean"


def has_mini_batch_mean() -> bool:
    """Whether the verl tree under test normalizes bypass mode's IS weights by the mini-batch's mean (verl 0005)."""
    return hasattr(importlib.import_module(MEAN_MODULE), FUNCTION)


def _rank_means(requests: dict, dp_group) -> dict[str, torch.Tensor]:
    """One rank's means, one per request, from the real function with the data-parallel group."""
    function = getattr(importlib.import_module(MEAN_MODULE), FUNCTION)
    return {key: function(**inputs, dp_group=dp_group) for key, inputs in requests.items()}


def worker_batch_means(requests: dict, dp_size: int) -> dict[str, torch.Tensor] | None:
    """{key: the mean each row carries}, for ``requests`` {key: the keyword arguments of
    ``compute_rollout_is_batch_mean`` for the whole mini-batch (``log_prob``, ``rollout_log_prob``,
    ``response_mask``, ``rollout_is``, ``rollout_is_threshold``)}, the rows dealt to ``dp_size`` ranks in contiguous
    blocks (as `harness.sim.engine_gradient` deals them): one value a row; None on a vanilla tree. At dp 2 one
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
    results = run_on_ranks(_rank_means, per_rank, MEAN_MODULE, "IS batch mean rank")
    return {
        key: torch.cat([result[key].expand(len(rows)) for result, rows in zip(results, rank_rows, strict=True)])
        for key in requests
    }
