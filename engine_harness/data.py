"""The mini-batch a training step gets, as verl's trainer hands it over, and each rank's share of it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tensordict import TensorDict

    from engine_harness.sim import Split

DATA_SEED = 2024
# the losses whose engine step computes the entropy (verl's actor losses)
ENTROPY_LOSSES = ("ppo", "geo_mean", "trinity")


def rollout_global_batch(vocab: int, sequences: int) -> TensorDict:
    """The whole mini-batch (all ranks) of `sim.make_rollout_batch`, holes in the response masks, with every field
    the critic and the actor losses read; the same on every rank."""
    from engine_harness.sim import make_rollout_batch

    fields = ("values", "returns", "old_log_probs", "ref_log_prob", "advantages")
    batch = make_rollout_batch(sequences, seed=DATA_SEED, extra_fields=fields, holes_in_mask=True)
    # log-probs of a random model sit near -log(V): keep the PPO ratio inside the clip range
    base = -math.log(vocab)
    batch["old_log_probs"] = base + 0.05 * batch["old_log_probs"]
    batch["ref_log_prob"] = base + 0.05 * batch["ref_log_prob"]
    batch["input_ids"] = batch["input_ids"] % vocab
    batch["prompts"] = batch["input_ids"][:, : batch["prompts"].shape[1]]
    batch["responses"] = batch["input_ids"][:, batch["prompts"].shape[1] :]
    return batch


def ragged_global_batch(
    vocab: int, sequences: int, prompt_len: int, response_len: int, seed: int = DATA_SEED
) -> TensorDict:
    """The whole mini-batch (all ranks), left-right padded as verl's trainer hands it over: ragged prompts and
    responses, one advantage per sequence (GRPO), old and reference log-probs near a random model's -log(V) so the
    PPO ratio stays inside the clip range, the critic's values and returns."""
    import torch
    from tensordict import TensorDict

    generator = torch.Generator().manual_seed(seed)
    prompt, response = prompt_len, response_len
    prompt_lens = torch.randint(1, prompt + 1, (sequences,), generator=generator)
    response_lens = torch.randint(1, response + 1, (sequences,), generator=generator)
    prompt_mask = torch.arange(prompt) >= prompt - prompt_lens[:, None]
    response_mask = torch.arange(response) < response_lens[:, None]
    attention_mask = torch.cat([prompt_mask, response_mask], dim=-1).long()
    input_ids = torch.randint(0, vocab, (sequences, prompt + response), generator=generator)
    shape = (sequences, response)
    base = -math.log(vocab)
    fields = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "prompts": input_ids[:, :prompt],
        "responses": input_ids[:, prompt:],
        "response_mask": response_mask.long(),
        "values": torch.randn(shape, generator=generator),
        "returns": torch.randn(shape, generator=generator),
        "advantages": torch.randn(sequences, 1, generator=generator).expand(shape).contiguous(),
        "old_log_probs": base + 0.05 * torch.randn(shape, generator=generator),
        "ref_log_prob": base + 0.05 * torch.randn(shape, generator=generator),
    }
    return TensorDict(fields, batch_size=[sequences])


def with_teacher(batch: TensorDict, vocab: int) -> TensorDict:
    """A copy of the batch with the teacher's log-prob of each position (top-1), as verl's trainer attaches it for
    the distillation loss's single-sample estimators."""
    import torch

    generator = torch.Generator().manual_seed(DATA_SEED + 1)
    batch = batch.clone()
    teacher = -math.log(vocab) + 0.5 * torch.randn(*batch["input_ids"].shape, 1, generator=generator)
    batch["teacher_logprobs"] = teacher
    batch["teacher_ids"] = torch.zeros(teacher.shape, dtype=torch.long)
    return batch


def token_budget(global_batch: TensorDict, world_size: int, micro_batches: int) -> int:
    """The token budget per rank that makes verl's dynamic batching cut every rank's rows into ``micro_batches``:
    verl makes ceil(tokens / budget) micro-batches, the most of any rank."""
    seq_lens = global_batch["attention_mask"].sum(-1)
    rank_tokens = [int(part.sum()) for part in seq_lens.chunk(world_size)]
    return max(max(-(-tokens // micro_batches) for tokens in rank_tokens), int(seq_lens.max()))


def step_data(
    global_batch: TensorDict,
    rank: int,
    world_size: int,
    split: Split,
    loss: str,
    budget: int | None = None,
    sequence_parallel: int = 1,
) -> TensorDict:
    """This rank's rows of the mini-batch, no-padding, with the fields verl's `TrainingWorker` and trainer attach for
    `train_batch` to cut them by ``split`` (dynamic: by ``budget`` when given, as a training run keeps one, else the
    budget that makes ``split``'s count here).

    With Ulysses every rank of a data-parallel group (rank // sp) holds the group's rows, and the engine cuts by
    ``budget`` x sp (`prepare_micro_batches`): the budget here is per rank, the group's over sp."""
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    dp_rank, dp_size = rank // sequence_parallel, world_size // sequence_parallel
    rows = len(global_batch) // dp_size
    data = left_right_2_no_padding(global_batch[dp_rank * rows : (dp_rank + 1) * rows].clone())
    if split.dynamic:
        if budget is None:
            budget = -(-token_budget(global_batch, dp_size, split.num_micro_batches) // sequence_parallel)
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=budget)
    else:
        tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=rows // split.num_micro_batches)
    tu.assign_non_tensor(
        data,
        temperature=1.0,
        use_remove_padding=True,
        use_fused_kernels=False,
        global_batch_size=len(global_batch),
        calculate_entropy=loss in ENTROPY_LOSSES,
    )
    return data
