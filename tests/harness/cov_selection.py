"""KL-Cov's and Clip-Cov's mini-batch selection where verl's engine worker makes it (verl 0004): once per rank's
mini-batch, before the split, with the data-parallel group; at dp 2 on two gloo ranks (`gloo_ranks`),
so that the collectives are real. Clip-Cov's rows are keyed by their place in the whole mini-batch, as the worker keys
them. A vanilla tree has no such function: its loss chooses per micro-batch.
"""

from __future__ import annotations

import importlib

import torch

from .gloo_ranks import run_on_ranks

SELECTION_MODULE = "verl.trainer.ppo.core_algos"
FUNCTIONS = {"kl_cov": "compute_kl_cov_mask", "clip_cov": "compute_clip_cov_mask"}
SEED = 1234  # Clip-Cov's pick


def has_mini_batch_selection(loss_mode: str) -> bool:
    """Whether the verl tree under test chooses the tokens of ``loss_mode`` over the mini-batch (verl 0004)."""
    return hasattr(importlib.import_module(SELECTION_MODULE), FUNCTIONS[loss_mode])


def _select(loss_mode: str, inputs: dict, config, dp_group) -> torch.Tensor:
    """The real selection function of ``loss_mode`` on one rank's rows."""
    function = getattr(importlib.import_module(SELECTION_MODULE), FUNCTIONS[loss_mode])
    if loss_mode == "kl_cov":
        return function(inputs["advantages"], inputs["log_prob"], inputs["response_mask"], config, dp_group=dp_group)
    return function(**inputs, config=config, seed=SEED, dp_group=dp_group)


def _rank_masks(requests: dict, dp_group) -> dict[str, torch.Tensor]:
    """One rank's masks, one per loss mode, from the real selection functions with the data-parallel group."""
    return {mode: _select(mode, inputs, config, dp_group) for mode, (inputs, config) in requests.items()}


def _rank_inputs(batch, log_prob: torch.Tensor, rows: torch.Tensor) -> dict:
    return {
        "old_log_prob": batch["old_log_probs"][rows],
        "log_prob": log_prob[rows],
        "advantages": batch["advantages"][rows],
        "response_mask": batch["response_mask"][rows],
        "row_ids": rows,
    }


def worker_masks(requests: dict, dp_size: int) -> dict[str, torch.Tensor | None]:
    """{loss mode: the tokens the worker chooses over its mini-batch}, for ``requests`` {loss mode: (the mini-batch
    (``old_log_probs``, ``advantages``, ``response_mask``), the current log-probs, the actor config)}, the rows dealt
    to ``dp_size`` ranks in contiguous blocks (as `harness.sim.engine_gradient` deals them): one mask over all
    rows; None on a vanilla tree. At dp 2 one pair of gloo ranks computes every mode's."""
    masks: dict[str, torch.Tensor | None] = {mode: None for mode in requests if not has_mini_batch_selection(mode)}
    todo = {mode: request for mode, request in requests.items() if mode not in masks}
    if not todo:
        return masks
    rank_rows = torch.arange(len(next(iter(todo.values()))[0])).chunk(dp_size)
    per_rank = [
        {mode: (_rank_inputs(batch, log_prob, rows), config) for mode, (batch, log_prob, config) in todo.items()}
        for rows in rank_rows
    ]
    results = run_on_ranks(_rank_masks, per_rank, SELECTION_MODULE, "cov selection rank")
    return masks | {mode: torch.cat([result[mode] for result in results]) for mode in todo}
