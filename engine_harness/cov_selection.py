"""KL-Cov's and Clip-Cov's mini-batch selection where verl's engine worker makes it: on each rank's mini-batch, before
the split.

Where the tree has ``compute_kl_cov_mask`` / ``compute_clip_cov_mask`` (verl 0004), the worker's ``train_batch``
calls it once per mini-batch with the data-parallel group and puts the mask in the batch (``kl_cov_mask`` /
``clip_cov_mask``), which the engine splits with the rest. `worker_masks` does the same for the ranks that
`engine_harness.sim` deals the batch to: at dp 1 in this process (no group), at dp 2 in two gloo processes
(`engine_harness.gloo_ranks`), so that the functions' all-reduce and all-gather are real collectives. Clip-Cov's
rows are keyed by their place in the whole mini-batch, as the worker keys them. Where the tree lacks the function
(vanilla), it returns None, and the loss chooses per micro-batch as upstream does.
"""

from __future__ import annotations

import importlib

import torch

from engine_harness.gloo_ranks import run_on_ranks

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
    to ``dp_size`` ranks in contiguous blocks (as `engine_harness.sim.engine_gradient` deals them): one mask over all
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
    if dp_size == 1:
        return masks | _rank_masks(per_rank[0], None)
    results = run_on_ranks(_rank_masks, per_rank, SELECTION_MODULE, "cov selection rank")
    return masks | {mode: torch.cat([result[mode] for result in results]) for mode in todo}
