"""Trinity-RFT's legacy Megatron actor (verl < 0.8) on CPU, without megatron-core, for the regression tests.

Runs ``trinity/trainer/verl_legacy/megatron_actor.py`` ``MegatronPPOActor.update_policy`` and its
``forward_backward_batch`` as they ship: the split into micro-batches (fixed, or verl 0.7.1's real
``rearrange_micro_batches``), ``forward_step``, ``loss_func`` and its weighting, and the optimizer step. What is
emulated, because megatron-core is not installed here (the modules below are stand-ins, put in ``sys.modules`` only
where the real module cannot be imported):

- Megatron's schedule (``get_forward_backward_func``): for each micro-batch, ``forward_step``, then its loss divided
  by the number of micro-batches and backpropagated, as Megatron's no-pipelining schedule does;
- ``parallel_state``: one pipeline stage, no virtual pipeline, tensor parallel size 1, the data parallel group the
  world (gloo);
- verl's mcore forward (``get_mcore_forward_fn``): the tiny LM's logits handed to the actor's own
  ``logits_processor``; ``vocab_parallel_log_probs_from_logits``: the log-softmax at the label;
- verl's ``MegatronPPOActor`` base class: it only stores its arguments; the router-replay helpers: never active;
- ``torch.cpu.empty_cache``, which ``update_policy`` calls at its end (a no-op where torch lacks it);
- the distributed optimizer: ``step()`` records the gradient (averaged over the ranks, as Megatron's DDP does)
  and returns ``(True, grad_norm, None)``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import logging
import sys
import types
from types import SimpleNamespace

import torch
from legacy_sim import (
    BATCH_SIZE,
    PROMPT_LEN,
    RESPONSE_LEN,
    RecordingOptimizer,
    Split,
    TinyLM,
    algorithm,
    rank_rollout,
)


class _StandIn(types.ModuleType):
    """A module this emulation put in ``sys.modules``."""


def _module(name: str, **attributes) -> types.ModuleType:
    module = _StandIn(name)
    module.__dict__.update(attributes)
    return module


def _no_pipelining_schedule(*, forward_step_func, data_iterator, model, num_microbatches, forward_only, **_):
    """Megatron's schedule without pipelining: each micro-batch's loss / num_microbatches, backpropagated."""
    outputs = []
    for _ in range(num_microbatches):
        output, loss_func = forward_step_func(data_iterator, model[0])
        loss, stats = loss_func(output)
        if not forward_only:
            (loss / num_microbatches).backward()
        outputs.append(stats)
    return outputs


def _log_probs_at(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def _mcore_forward_fn(hf_config):  # type: ignore[no-untyped-def]
    def forward(model, input_ids, logits_processor, logits_processor_args, **_):  # type: ignore[no-untyped-def]
        return logits_processor(model(input_ids).logits, **logits_processor_args)

    return forward


class _BaseActor:
    """Stands in for verl's ``MegatronPPOActor``: stores what it is given."""

    def __init__(self, config, model_config, hf_config, tf_config, actor_module, actor_optimizer):  # type: ignore[no-untyped-def]
        self.config, self.hf_config, self.tf_config = config, hf_config, tf_config
        self.actor_module, self.actor_optimizer = actor_module, actor_optimizer
        self.use_fused_kernels = False
        self.has_multi_modal_inputs = False
        self.enable_routing_replay = False


class _NeverActive:
    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return lambda *args, **kwargs: False


def install_stand_ins() -> None:
    """Put the stand-ins in ``sys.modules`` for the modules that need megatron-core (idempotent)."""
    import torch.distributed as dist

    if isinstance(sys.modules.get("megatron.core.parallel_state"), _StandIn):
        return
    try:
        importlib.import_module("megatron.core")
    except ImportError:
        pass
    else:
        raise RuntimeError("megatron-core is installed: run the real actor instead of this emulation")
    if not hasattr(torch.cpu, "empty_cache"):  # update_policy empties the device cache at its end
        torch.cpu.empty_cache = lambda: None
    single = {}

    def own_group():  # type: ignore[no-untyped-def]
        if "group" not in single:  # a group of this rank alone: pipeline and tensor parallel size 1
            groups = [dist.new_group([rank]) for rank in range(dist.get_world_size())]
            single["group"] = groups[dist.get_rank()]
        return single["group"]

    mpu = _module(
        "megatron.core.parallel_state",
        get_data_parallel_group=lambda *a, **k: dist.group.WORLD,
        get_data_parallel_world_size=lambda *a, **k: dist.get_world_size(),
        get_pipeline_model_parallel_last_rank=lambda: dist.get_rank(),
        get_pipeline_model_parallel_group=own_group,
        get_pipeline_model_parallel_world_size=lambda: 1,
        get_virtual_pipeline_model_parallel_world_size=lambda: None,
        get_tensor_model_parallel_group=own_group,
        get_tensor_model_parallel_rank=lambda: 0,
        get_tensor_model_parallel_world_size=lambda: 1,
    )
    vocab = SimpleNamespace(
        vocab_range_from_per_partition_vocab_size=lambda size, rank, world_size: (rank * size, (rank + 1) * size)
    )
    modules = {
        "megatron": _module("megatron"),
        "megatron.core": _module("megatron.core", parallel_state=mpu),
        "megatron.core.parallel_state": mpu,
        "megatron.core.pipeline_parallel": _module(
            "megatron.core.pipeline_parallel", get_forward_backward_func=lambda: _no_pipelining_schedule
        ),
        "megatron.core.tensor_parallel": _module("megatron.core.tensor_parallel"),
        "megatron.core.tensor_parallel.utils": _module("megatron.core.tensor_parallel.utils", VocabUtility=vocab),
        "verl.utils.megatron.pipeline_parallel": _module(
            "verl.utils.megatron.pipeline_parallel", make_batch_generator=lambda batches, vpp_size: iter(batches)
        ),
        "verl.utils.megatron.router_replay_patch": _module(
            "verl.utils.megatron.router_replay_patch", RouterReplay=_NeverActive(), RouterReplayAction=_NeverActive()
        ),
        "verl.utils.megatron.router_replay_utils": _module(
            "verl.utils.megatron.router_replay_utils",
            RouterReplayHelper=_NeverActive(),
            merge_router_topk_indices=None,
            reorder_and_merge_vpp_layers=None,
            set_router_replay_data=None,
        ),
        "verl.utils.megatron.tensor_parallel": _module(
            "verl.utils.megatron.tensor_parallel", vocab_parallel_log_probs_from_logits=_log_probs_at
        ),
        "verl.utils.megatron_utils": _module(
            "verl.utils.megatron_utils", get_megatron_mtp_loss=None, unwrap_model=lambda model: model
        ),
        "verl.workers.megatron_workers": _module(
            "verl.workers.megatron_workers", MegatronPPOActor=_BaseActor, logger=logging.getLogger(__name__)
        ),
        "verl.models.mcore": _module(
            "verl.models.mcore", get_mcore_forward_fn=_mcore_forward_fn, get_mcore_forward_fused_fn=None
        ),
    }
    sys.modules.update(modules)


class MegatronModel(TinyLM):
    """The tiny LM as a Megatron model chunk: Megatron's DDP wrapper zeroes its gradient buffer."""

    def zero_grad_buffer(self) -> None:
        self.zero_grad(set_to_none=True)


class RecordingDistributedOptimizer(RecordingOptimizer):
    """lr 0; ``step()`` records the gradient averaged over the ranks and returns (success, grad_norm, zeros), as
    Megatron's optimizer does."""

    def step(self, closure=None):  # type: ignore[override]
        super().step(closure)
        return True, self.gradients[-1].norm(), None


@functools.cache
def megatron_gradients(name: str, loss_agg_mode: str, split: Split, calculate_entropy: bool = True):
    """The gradient of every optimizer step of the legacy Megatron actor's ``update_policy`` on this rank's rows,
    as one mini-batch (the actor config as the legacy FSDP tests use it, Megatron's fields added). Measured once
    per setting (the one-micro-batch reference is shared)."""
    from omegaconf import OmegaConf

    install_stand_ins()
    from trinity.trainer.verl_legacy.megatron_actor import MegatronPPOActor

    from engine_harness.trinity_configs import default_loss_scale_switch

    data = rank_rollout()
    rows = len(data)
    budget = None
    if split.dynamic:
        total_tokens = int(data.batch["attention_mask"].sum())
        budget = max(-(-total_tokens // split.num_micro_batches), PROMPT_LEN + RESPONSE_LEN)
    config = OmegaConf.create(
        {
            "ppo_mini_batch_size": rows,
            "ppo_micro_batch_size_per_gpu": rows // split.num_micro_batches,
            "use_dynamic_bsz": split.dynamic,
            "ppo_max_token_len_per_gpu": budget,
            "ppo_epochs": 1,
            "shuffle": False,
            "data_loader_seed": 0,
            "clip_ratio": 0.2,
            "entropy_coeff": 0.0,
            "policy_loss": {"loss_mode": "vanilla"},
            "router_replay": {"mode": "disabled"},
            "megatron": {"context_parallel_size": 1, "use_remove_padding": False},
            # the legacy config translation copies the trainer's switch (its default: the tree's)
            "fix_actor_microbatch_loss_scale": default_loss_scale_switch(),
        }
    )
    model = MegatronModel()
    optimizer = RecordingDistributedOptimizer(model.parameters())
    with contextlib.redirect_stdout(io.StringIO()):
        actor = MegatronPPOActor(config, None, None, SimpleNamespace(), [model], optimizer)
    algo = algorithm(name, loss_agg_mode, split, mini_batch=BATCH_SIZE)
    if not calculate_entropy:
        algo.entropy_loss_fn = "none"
    actor.set_algorithm(algo)
    actor.update_policy(actor.make_minibatch_iterator(data))
    return optimizer.gradients
