"""Trinity-RFT's legacy actor update (verl < 0.8) as it ships, on one CPU process, for the regression tests.

Runs ``trinity/trainer/verl_legacy/dp_actor.py`` ``DataParallelPPOActor.update_policy`` with its own micro-batch
split, scaling and optimizer step; a tiny torch language model stands in for the FSDP-wrapped one, and an
optimizer with lr 0 records the gradient of every optimizer step. The only other adaptation is what Trinity's
legacy worker does before it builds the actor (its ``rearrange_micro_batches`` replaces verl's).
"""

from __future__ import annotations

import contextlib
import functools
import io
from pathlib import Path
from types import SimpleNamespace

import torch
from engine_sim import PROMPT_LEN, RESPONSE_LEN, Split, make_rollout_batch

BATCH_SIZE = 48  # rows: 24 DPO pairs (rows 2i, 2i+1)
NUM_EXPERT = 16  # MIX/MIX_CHORD: the last rows are expert data
VOCAB, HIDDEN = 64, 8


def init_single_process_group(folder: Path) -> None:
    """One gloo process: verl's legacy actor asks torch.distributed for its rank and all-reduces counts."""
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"file://{folder / 'store'}", rank=0, world_size=1)


class TinyLM(torch.nn.Module):
    """Stands in for the causal LM: logits from the token alone, so every row's log-probs are its own."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Parameter(torch.randn(VOCAB, HIDDEN, generator=generator))
        self.head = torch.nn.Parameter(torch.randn(HIDDEN, VOCAB, generator=generator) / HIDDEN**0.5)

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, **_):
        return SimpleNamespace(logits=torch.tanh(self.embed[input_ids]) @ self.head)


class RecordingOptimizer(torch.optim.SGD):
    """lr 0: records the gradient at every optimizer step and never moves the weights."""

    def __init__(self, params) -> None:
        super().__init__(params, lr=0.0)
        self.gradients: list[torch.Tensor] = []

    def step(self, closure=None):
        grads = [p.grad.flatten() for group in self.param_groups for p in group["params"] if p.grad is not None]
        self.gradients.append(torch.cat(grads).clone())


def legacy_actor_config(ppo_mini_batch_size: int, micro_batch_rows: int | None, budget: int | None) -> dict:
    """The actor config fields the legacy ``update_policy`` reads, as Trinity's legacy worker leaves them: a fixed
    micro-batch of ``micro_batch_rows`` rows, or dynamic batching with a token ``budget``."""
    if budget is not None:
        micro = {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": budget, "ppo_micro_batch_size_per_gpu": None}
    else:
        micro = {"use_dynamic_bsz": False, "ppo_max_token_len_per_gpu": 16384}
        micro["ppo_micro_batch_size_per_gpu"] = micro_batch_rows
    return {
        "ppo_mini_batch_size": ppo_mini_batch_size,
        "ppo_epochs": 1,
        "shuffle": False,
        "ulysses_sequence_parallel_size": 1,
        "use_remove_padding": False,
        "use_fused_kernels": False,
        "use_prefix_grouper": False,
        "use_torch_compile": False,
        "entropy_from_logits_with_chunking": False,
        "entropy_checkpointing": False,
        "fix_actor_microbatch_loss_scale": False,
        "grad_clip": 1.0e9,
        "fsdp_config": {"dtype": "float32"},
        "policy_loss": {"loss_mode": "vanilla"},
        **micro,
    }


def algorithm(name: str, loss_agg_mode: str, split: Split):
    """Trinity's AlgorithmConfig for policy loss ``name`` with k2 KL and an entropy term, all by ``loss_agg_mode``."""
    from trinity.algorithm import POLICY_LOSS_FN
    from trinity.common.config import AlgorithmConfig

    args = POLICY_LOSS_FN.get(name).default_args()
    if "loss_agg_mode" in args:
        args["loss_agg_mode"] = loss_agg_mode
    if name in ("mix", "mix_chord"):
        args.update(
            use_dynamic_bsz=split.dynamic,
            ppo_mini_batch_size=BATCH_SIZE,
            ppo_micro_batch_size_per_gpu=BATCH_SIZE // split.num_micro_batches,
            ngpus_trainer=1,
            train_batch_size_usual=BATCH_SIZE - NUM_EXPERT,
            train_batch_size_expert=NUM_EXPERT,
        )
    return AlgorithmConfig(
        policy_loss_fn=name,
        policy_loss_fn_args=args,
        kl_loss_fn="k2",
        kl_loss_fn_args={"kl_coef": 0.05},
        entropy_loss_fn="mix" if name in ("mix", "mix_chord") else "default",
        entropy_loss_fn_args={"entropy_coef": 0.01},
        loss_agg_mode=loss_agg_mode,
    )


def rollout(seed: int = 0):
    """A rollout batch as Trinity's legacy trainer hands it over, rows 2i and 2i+1 forming DPO pair i."""
    from verl import DataProto

    batch = make_rollout_batch(
        BATCH_SIZE, seed=seed, extra_fields=("old_log_probs", "ref_log_prob", "advantages"), holes_in_mask=True
    )
    batch["input_ids"] = batch["input_ids"] % VOCAB
    batch["responses"] = batch["input_ids"][:, PROMPT_LEN:]
    batch["prompts"] = batch["input_ids"][:, :PROMPT_LEN]
    batch["old_log_probs"] = -batch["old_log_probs"].abs() - 3.0
    batch["ref_log_prob"] = -batch["ref_log_prob"].abs() - 3.0
    batch["expert_mask"] = torch.arange(BATCH_SIZE) >= BATCH_SIZE - NUM_EXPERT
    batch["step"] = torch.full((BATCH_SIZE,), 3)
    tensors = {key: batch[key] for key in batch.keys()}
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def legacy_actor(name: str, loss_agg_mode: str, split: Split, ppo_mini_batch_size: int = BATCH_SIZE):
    """Trinity's legacy ``DataParallelPPOActor``, with its algorithm set as the worker sets it at start-up (where
    a configuration the actor refuses raises). ``split`` cuts the whole batch into that many micro-batches: fixed
    ones of ``BATCH_SIZE / K`` rows, or a token budget of ``1 / K`` of the batch's tokens."""
    from omegaconf import OmegaConf
    from trinity.trainer.verl_legacy.dp_actor import DataParallelPPOActor
    from trinity.trainer.verl_legacy.utils import rearrange_micro_batches
    from verl.utils import seqlen_balancing

    # what Trinity's legacy ActorRolloutRefWorker.__init__ does to verl before it builds the actor
    seqlen_balancing.rearrange_micro_batches = rearrange_micro_batches
    model = TinyLM()
    optimizer = RecordingOptimizer(model.parameters())
    if split.dynamic:
        total_tokens = int(rollout().batch["attention_mask"].sum())
        budget = max(-(-total_tokens // split.num_micro_batches), PROMPT_LEN + RESPONSE_LEN)
        config = legacy_actor_config(ppo_mini_batch_size, None, budget)
    else:
        config = legacy_actor_config(ppo_mini_batch_size, BATCH_SIZE // split.num_micro_batches, None)
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints its settings on rank 0
        actor = DataParallelPPOActor(OmegaConf.create(config), model, optimizer)
    actor.set_algorithm(algorithm(name, loss_agg_mode, split))
    return actor, optimizer


@functools.cache
def legacy_gradients(name: str, loss_agg_mode: str, split: Split, ppo_mini_batch_size: int = BATCH_SIZE):
    """The gradient of every optimizer step of one ``update_policy`` call, and the rows of each micro-batch."""
    from verl.utils import seqlen_balancing

    actor, optimizer = legacy_actor(name, loss_agg_mode, split, ppo_mini_batch_size)
    seen_rows: list[list[int]] = []
    original = seqlen_balancing.rearrange_micro_batches

    offset = [0]  # update_policy drops row_id, but keeps the rows in order: mini-batches are contiguous slices

    def recording(batch, *args, **kwargs):
        micro_batches, partitions = original(batch, *args, **kwargs)
        seen_rows.extend([[offset[0] + int(i) for i in partition] for partition in partitions])
        offset[0] += len(batch)
        return micro_batches, partitions

    seqlen_balancing.rearrange_micro_batches = recording
    try:
        actor.update_policy(rollout())
    finally:
        seqlen_balancing.rearrange_micro_batches = original
    return optimizer.gradients, seen_rows
