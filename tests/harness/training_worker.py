"""verl's real ``TrainingWorker`` with a stand-in engine (`StubEngine`, which records every mini-batch it is sent),
for the tests of what the worker does to a mini-batch before the engine splits it: verl 0004's mini-batch hooks
(0005's and 0006's selection masks, 0007's IS batch mean); verl-0.7 0003's and 0004's worker methods.
"""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch

from engine_harness.sim import pack_model_output
from engine_harness.worker_statistics import has_mini_batch_hooks, worker_on


class StubEngine:
    """What ``TrainingWorker.train_mini_batch`` and ``train_batch`` ask of the engine, recording each mini-batch it
    is sent; ``infer_batch`` returns ``log_probs`` (the current policy's) in the engine's no-padding layout."""

    def __init__(self, log_probs: torch.Tensor, before_update: torch.Tensor | None = None):
        self.log_probs = log_probs
        self.before_update = before_update  # the policy's log-probs until the first train_batch, where given
        self.trained: list = []
        self.inferred = 0

    def train_mode(self, **kwargs):
        return nullcontext()

    eval_mode = train_mode

    def train_batch(self, data, loss_function):
        self.trained.append(data)
        self.before_update = None
        return {}

    def infer_batch(self, data, loss_function=None):
        self.inferred += 1
        log_probs = self.log_probs if self.before_update is None else self.before_update
        return {"model_output": {"log_probs": pack_model_output(data, log_probs[data["row_id"]])}}

    def get_data_parallel_size(self):
        return 1

    def get_data_parallel_rank(self):
        return 0

    def get_data_parallel_group(self):
        return None

    def is_mp_src_rank_with_outputs(self):
        return False

    def lr_scheduler_step(self):
        return 0.0


class _ModelConfig(dict):
    """The model config's one field ``train_batch`` reads: by ``.get`` (verl 0.8.0 and later) or as an attribute
    (0.7.x)."""

    use_remove_padding = False


def hooks_asked(worker: Any) -> list[str]:
    """The losses whose mini-batch statistics the actor's ``TrainingWorker`` (or `harness.actor_init`'s stand-in)
    was asked for, by the name of the hook's factory (verl 0004)."""
    return [hook.__qualname__.split(".")[0] for hook in getattr(worker, "mini_batch_hooks", [])]


def train_mini_batches(
    engine: StubEngine, batch, mini_batch_size: int, infer_first: bool = False, **worker_fields: Any
) -> None:
    """Run the real ``TrainingWorker.train_mini_batch`` on ``batch`` (left-right padded) in mini-batches of
    ``mini_batch_size`` rows and micro-batches of 4, against ``engine``; ``worker_fields`` are the attributes
    ``ActorRolloutRefWorker.init_model`` sets on it for the loss (which `harness.actor_init` checks it does).
    ``infer_first``: the worker's real ``infer_batch`` computes the batch's log-probs first, as the trainer's
    ``compute_log_prob`` does before the update."""
    import inspect

    from verl.utils import tensordict_utils as tu
    from verl.utils.profiler import DistProfiler
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.padding import left_right_2_no_padding

    worker = worker_on(engine, **worker_fields)  # the methods under test need only these and the below
    worker.loss_fn = lambda *args: None
    worker.model_config = _ModelConfig()
    worker.engine_config = SimpleNamespace(
        forward_only=False,
        use_dynamic_bsz=False,
        max_token_len_per_gpu=None,
        micro_batch_size_per_gpu=4,
        use_fused_kernels=False,
    )
    worker.profiler = DistProfiler(rank=0, config=None)  # disabled; verl 0.9.1 steps it once per mini-batch
    data = left_right_2_no_padding(batch)
    if infer_first:
        worker.engine_config.infer_micro_batch_size_per_gpu = 4
        worker.engine_config.infer_max_token_len_per_gpu = None
        inferred = data.clone()
        tu.assign_non_tensor(inferred, global_token_num=None)
        inspect.unwrap(TrainingWorker.infer_batch)(worker, inferred)
    train_mini_batch = inspect.unwrap(TrainingWorker.train_mini_batch)
    gather = nullcontext()
    if 'if "input_ids" in' not in inspect.getsource(train_mini_batch):
        # verl 0.7.x counts every mini-batch's tokens from its input_ids and all-gathers the counts over the
        # data-parallel group: one rank here, and no process group
        gather = mock.patch("torch.distributed.all_gather_object", _gather_on_one_rank)
    else:
        del data["input_ids"]  # its token count is all-gathered for the MFU: not what these tests are about
    tu.assign_non_tensor(data, mini_batch_size=mini_batch_size, epochs=1)
    with gather:
        train_mini_batch(worker, data)


def _gather_on_one_rank(output: list, obj: Any, group=None) -> None:
    """``torch.distributed.all_gather_object`` on a group of one rank, without a process group."""
    output[0] = obj


def add_loss_input(batch: Any, key: str, value: torch.Tensor) -> None:
    """Put ``value`` in ``batch`` as the worker does for the loss's statistic ``key`` (per row): named in the batch's
    ``policy_loss_input_keys`` on a tree with mini-batch hooks (verl 0004), which ``ppo_loss`` reads; a tree of the
    verl-0.7 series reads the fixed keys."""
    batch[key] = value
    if has_mini_batch_hooks():
        from tensordict import NonTensorData
        from verl.utils import tensordict_utils as tu

        keys = tuple(tu.get(batch, "policy_loss_input_keys", default=None) or ())
        tu.assign_non_tensor(batch, policy_loss_input_keys=NonTensorData((*keys, key)))
