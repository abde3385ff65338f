"""Mirror of ``trinity.trainer.verl.config``: the two helpers patch 0004 adds there.

The veRL trainer's `_update_actor` and `PolicyLossGroupValidator` read them: the installer adds them to the trainer's
module (as the patch's import does), and the validator mirror imports them from here. The upstream module itself is
not changed: nothing else of it reads them.
"""

from __future__ import annotations

from typing import Any


def actor_data_parallel_size(cfg: Any, actor: Any) -> int:
    """The number of data-parallel GPUs of the actor: the trainer's GPUs over its model parallelism."""
    if actor.strategy.startswith("megatron"):
        engine = actor.megatron
        model_parallel_size = (
            engine.tensor_model_parallel_size * engine.pipeline_model_parallel_size * engine.context_parallel_size
        )
    else:
        model_parallel_size = actor.ulysses_sequence_parallel_size
    return max(cfg.cluster.trainer_gpu_num // model_parallel_size, 1)


def group_micro_batch_size(groups: int, micro_batch_size: int) -> int:
    """The largest micro-batch size, in groups, not above `micro_batch_size`, that divides `groups`."""
    return max(size for size in range(1, micro_batch_size + 1) if groups % size == 0)
