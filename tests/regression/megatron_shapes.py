"""Megatron's process shapes, as megatron-core 0.16.1 lays them out, for the seam tests of the Megatron losses.

megatron-core 0.16.1 (the release verl 0.8.0's Docker images and trinity-rft 0.6.0's ``megatron`` extra pin) imports
on this CPU, and its parallel state initializes on gloo for tensor, pipeline and context parallel sizes 1 and 2, but
its schedules, its DDP and its model forward allocate on CUDA unconditionally (docs/evidence/2026-12-05-megatron.md), so
no Megatron step runs here. What a step does to a loss, read in megatron-core 0.16.1 and verl 0.8.0 / 0.7.1, and
followed here rank by rank:

- Ranks are laid out in the order ``tp-cp-ep-dp-pp`` (``initialize_model_parallel``'s default ``order``; measured with
  megatron-core 0.16.1 on gloo: at world 4, tp 1 cp 2, ranks 0 and 1 are cp ranks 0 and 1 of dp rank 0). The data
  parallel group (``get_data_parallel_group()``, ``with_context_parallel=False``) holds the ranks that differ only in
  their dp coordinate; the group gradients are reduced over holds those that differ in dp or cp.
- verl dispatches rows by ``get_data_parallel_rank()`` (verl 0.8.0 ``engine_workers.py``, verl 0.7.1
  ``megatron_workers.py``): the tensor, pipeline and context parallel ranks of one data parallel rank hold the same
  rows, a contiguous block of the mini-batch.
- Context parallelism: each cp rank runs its chunks of every sequence and all-gathers the outputs, keeping autograd
  only on its own chunks (verl 0.8.0 ``verl/models/mcore/util.py`` ``postprocess_thd_engine``; verl 0.7.1
  ``postprocess_packed_seqs``): every cp rank computes the loss of the whole rows, and its gradient reaches only its
  own tokens. Which tokens a rank owns does not change a sum over the cp ranks; here, each row's ``2 x cp`` chunks
  with rank c owning chunks c and ``2 cp - 1 - c``, as ``preprocess_packed_seqs`` deals them.
- Only the last pipeline stage computes the loss; the earlier stages get the same output gradient through the
  pipeline's send and receive, unscaled.
- Megatron's schedule, for a loss function that returns two values (verl's engine and Trinity's legacy actor both
  do): ``output_tensor *= cp_group_size; output_tensor /= num_microbatches`` (``forward_step_calc_loss``,
  ``megatron/core/pipeline_parallel/schedules.py`` lines 264-269 of 0.16.1).
- Megatron's DDP, without ``calculate_per_token_loss``: gradients scaled by ``1 / dp_cp_group.size()`` and summed over
  the data-and-context parallel group, or averaged over it with ``average_in_collective``
  (``megatron/core/distributed/distributed_data_parallel.py`` lines 281-293), so with the ``x cp`` above every gradient
  is averaged over the data parallel ranks alone.
- Tensor parallel ranks hold different shards of the weights and compute the same loss: each shard's gradient is
  reduced over its own data-and-context parallel group, never over tensor parallel ranks. So each tensor parallel
  rank's gradient is followed here on its own, and each must be the whole mini-batch's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

# (this rank's rows of the mini-batch, the model output as this rank sees it, what its engine all-reduced and
# recorded: dp_size and batch_num_tokens) -> the loss of each micro-batch as its loss function hands it to Megatron
RankLoss = Callable[[torch.Tensor, torch.Tensor, dict], list[torch.Tensor]]


@dataclass(frozen=True)
class Coordinates:
    """One rank's place in each parallel dimension."""

    tp: int
    cp: int
    dp: int
    pp: int


@dataclass(frozen=True)
class MegatronShape:
    """Megatron's parallel sizes: data, tensor, pipeline and context parallel."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def coordinates(self, rank: int) -> Coordinates:
        """Rank ``rank``'s coordinates in megatron-core's default order ``tp-cp-ep-dp-pp`` (expert parallel 1)."""
        tp, rest = rank % self.tp, rank // self.tp
        cp, rest = rest % self.cp, rest // self.cp
        return Coordinates(tp=tp, cp=cp, dp=rest % self.dp, pp=rest // self.dp)

    def data_parallel_group(self, rank: int) -> list[int]:
        """The ranks of ``get_data_parallel_group()`` (without context parallel) that ``rank`` belongs to."""
        own = self.coordinates(rank)
        peers = [(peer, self.coordinates(peer)) for peer in range(self.world)]
        return [peer for peer, c in peers if (c.tp, c.cp, c.pp) == (own.tp, own.cp, own.pp)]

    def __str__(self) -> str:
        return f"dp{self.dp}-tp{self.tp}-pp{self.pp}-cp{self.cp}"


def context_chunk_mask(cp: int, cp_rank: int, length: int) -> torch.Tensor:
    """The positions of a row of ``length`` tokens that context parallel rank ``cp_rank`` runs (load-balanced)."""
    chunk = torch.arange(length) * (2 * cp) // length  # which of the 2 x cp chunks each position falls in
    return (chunk == cp_rank) | (chunk == 2 * cp - 1 - cp_rank)


def megatron_gradient(
    shape: MegatronShape, outputs: torch.Tensor, response_mask: torch.Tensor, rank_loss: RankLoss
) -> list[torch.Tensor]:
    """The gradient Megatron's DDP leaves for the model output ``outputs`` (rows, response length), one per tensor
    parallel rank (its shard's view), after every rank ran ``rank_loss`` on its rows in ``shape``.

    ``batch_num_tokens`` is the response tokens all-reduced over the rank's data parallel group and ``dp_size`` that
    group's size, as verl 0.8.0's Megatron engine (``get_data_parallel_group`` / ``get_data_parallel_size``) and
    Trinity's legacy Megatron actor with patch 0008 (``mpu.get_data_parallel_group()`` /
    ``mpu.get_data_parallel_world_size()``) compute them; the seam test checks their sources call exactly those."""
    rows_of_dp_rank = torch.arange(len(outputs)).chunk(shape.dp)
    shards = [torch.zeros_like(outputs) for _ in range(shape.tp)]
    for rank in range(shape.world):
        own = shape.coordinates(rank)
        if own.pp != shape.pp - 1:
            continue  # no loss before the last stage
        tokens = sum(
            int(response_mask[rows_of_dp_rank[shape.coordinates(peer).dp]].sum())
            for peer in shape.data_parallel_group(rank)
        )
        leaf = outputs.detach().clone().requires_grad_(True)
        mine = context_chunk_mask(shape.cp, own.cp, outputs.shape[1])
        seen = torch.where(mine, leaf, leaf.detach())  # the all-gather keeps autograd on this rank's chunks only
        losses = rank_loss(rows_of_dp_rank[own.dp], seen, {"dp_size": shape.dp, "batch_num_tokens": tokens})
        scheduled = sum(loss * shape.cp / len(losses) for loss in losses)  # forward_step_calc_loss
        (gradient,) = torch.autograd.grad(scheduled, leaf)
        shards[own.tp] += gradient / (shape.dp * shape.cp)  # DDP over the data-and-context parallel group
    return shards
