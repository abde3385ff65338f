"""What a training run needs beyond one step: the same start for every run, a pool of mini-batches of different
lengths, and how far two runs' weights end apart.

Every run of one engine starts from the weights and the (empty) optimizer state it had when built: `EngineStart`
keeps this rank's shards of them and puts them back. Distances are summed over every rank's shards, so each rank gets
the distance of the whole model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine_harness.data import DATA_SEED, ragged_global_batch, token_budget

if TYPE_CHECKING:
    import torch
    from tensordict import TensorDict

# each pooled mini-batch's longest prompt and response, as a share of the model preset's: a token budget set for the
# longest makes fewer micro-batches for the others, so a dynamic split's K changes from step to step
POOL_SHARES = (1.0, 0.4, 0.7, 0.25)
SHUFFLE_SEED = 7


def _shards(engine: Any) -> list[torch.Tensor]:
    """This rank's shard of every parameter (FSDP2 keeps DTensors), as the live tensors."""
    return [param.to_local() if hasattr(param, "to_local") else param for param in engine.module.parameters()]


def weights(engine: Any) -> list[torch.Tensor]:
    """A copy of this rank's weight shards."""
    return [shard.detach().clone() for shard in _shards(engine)]


@dataclass
class EngineStart:
    """The weights and optimizer state an engine had before its first step, to start every run from."""

    weights: list[Any]
    optimizer_state: dict

    @classmethod
    def of(cls, engine: Any) -> EngineStart:
        return cls(weights(engine), engine.optimizer.state_dict())

    def restore(self, engine: Any) -> None:
        import torch

        with torch.no_grad():
            for shard, saved in zip(_shards(engine), self.weights, strict=True):
                shard.copy_(saved)
        # the state before any step is empty: loading it drops AdamW's moments and step counts
        engine.optimizer.load_state_dict(self.optimizer_state)


def relative_distance(end: Sequence[Any], reference: Sequence[Any], start: Sequence[Any]) -> float:
    """||end - reference|| / ||reference - start|| over the whole model (every rank's shards): how far a run ended
    from the reference run, relative to how far the reference moved."""
    import torch
    import torch.distributed as dist

    def squared(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
        return sum(float((x.double() - y.double()).pow(2).sum()) for x, y in zip(a, b, strict=True))

    sums = torch.tensor([squared(end, reference), squared(reference, start)], dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(sums)
    return math.sqrt(sums[0] / sums[1]) if sums[1] > 0 else math.inf


def mini_batch_pool(vocab: int, sequences: int, prompt_len: int, response_len: int) -> list[TensorDict]:
    """One mini-batch per share of `POOL_SHARES`, each with its own seed, its sequences up to that share of the
    preset's lengths."""
    lengths = [(max(1, round(prompt_len * share)), max(1, round(response_len * share))) for share in POOL_SHARES]
    return [ragged_global_batch(vocab, sequences, *pair, seed=DATA_SEED + index) for index, pair in enumerate(lengths)]


def pool_budget(pool: Sequence[TensorDict], world_size: int, micro_batches: int) -> int:
    """One token budget for a whole run: the longest mini-batch of the pool makes ``micro_batches`` per rank."""
    return max(token_budget(batch, world_size, micro_batches) for batch in pool)


def shuffled_rows(batch: TensorDict, world_size: int) -> TensorDict:
    """The mini-batch with each rank's rows in another order: the same arithmetic, summed in another order."""
    import torch

    rows = len(batch) // world_size
    generator = torch.Generator().manual_seed(SHUFFLE_SEED)
    order = torch.cat([rank * rows + torch.randperm(rows, generator=generator) for rank in range(world_size)])
    return batch[order]
