"""The rollout batch, the model outputs and the configs verl 0.8's engine feeds a loss, without a model; and what a
CPU-only machine needs (`use_cpu_unpadding`: verl's unpad helpers dispatch to flash_attn, CUDA only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from tensordict import TensorDict

PROMPT_LEN = 8
RESPONSE_LEN = 16


def load_value_head_with_config_attention() -> None:
    """verl's `load_valuehead_model` hard-codes ``attn_implementation="flash_attention_2"``: load the same class
    (`AutoModelForTokenClassification`, what verl tries first) with the model config's attention (sdpa) instead.
    Not on the loss path; the engine end-to-end tests and scripts/gpu_proof.py use it where flash_attn is absent."""
    import verl.utils.model as verl_model

    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation=model_config._attn_implementation,
            trust_remote_code=trust_remote_code,
        )

    verl_model.load_valuehead_model = load_valuehead_model


@contextlib.contextmanager
def every_rank_loads_weights() -> Iterator[None]:
    """Trinity's `_build_module` asks `torch.cuda.get_device_capability(0)` and, on Hopper (>= 9), builds ranks > 0
    on the meta device; while it runs report (0, 0), so every rank loads the checkpoint itself with the config's
    attention (Trinity's path on every other device, and on CPU)."""
    real = torch.cuda.get_device_capability
    torch.cuda.get_device_capability = lambda device=None: (0, 0)
    try:
        yield
    finally:
        torch.cuda.get_device_capability = real


def actor_config(loss_agg_mode: str, strategy: str = "fsdp", **fields):
    """A verl FSDP actor config as these tests build it: one-row micro-batches declared (the splits are the
    engine's own), one rollout per prompt, no torch.compile; ``strategy`` "fsdp2" for the real engine; ``fields``
    set the rest (policy loss, KL, entropy)."""
    from verl.workers.config import FSDPActorConfig

    return FSDPActorConfig(
        strategy=strategy,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=1,
        use_torch_compile=False,
        loss_agg_mode=loss_agg_mode,
        **fields,
    )


def critic_model_fields() -> dict:
    """What a loss test's ``CriticConfig`` needs besides its own fields: verl 0.7.x's loads the model named by its
    deprecated ``model`` section unless given a ``model_config`` (0.8.0 dropped the field); the loss reads neither,
    so an empty one (none on 0.8.0 and later)."""
    import dataclasses

    from verl.workers.config import CriticConfig

    return {"model_config": {}} if "model_config" in {f.name for f in dataclasses.fields(CriticConfig)} else {}


def use_cpu_unpadding() -> None:
    """Point verl's unpad helpers at its pure-torch implementation (no flash_attn on CPU)."""
    import verl.utils.attention_utils as attention_utils
    import verl.utils.npu_flash_attn_utils as torch_impl

    functions = (torch_impl.index_first_axis, torch_impl.pad_input, torch_impl.rearrange, torch_impl.unpad_input)
    attention_utils._get_attention_functions = lambda: functions


def make_rollout_batch(
    batch_size: int, seed: int, extra_fields: Sequence[str] = (), holes_in_mask: bool = False
) -> TensorDict:
    """A left-right padded batch with ragged prompt and response lengths, as the trainer builds it, with the per-token
    float ``extra_fields``; ``holes_in_mask``: some response tokens masked out, as Trinity's multi-turn masks are."""
    generator = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(1, PROMPT_LEN + 1, (batch_size,), generator=generator)
    response_lens = torch.randint(1, RESPONSE_LEN + 1, (batch_size,), generator=generator)
    positions = torch.arange(PROMPT_LEN + RESPONSE_LEN)
    prompt_mask = positions[:PROMPT_LEN] >= PROMPT_LEN - prompt_lens[:, None]
    response_attention = positions[:RESPONSE_LEN] < response_lens[:, None]
    response_mask = response_attention.clone()
    if holes_in_mask:
        response_mask &= torch.rand(batch_size, RESPONSE_LEN, generator=generator) > 0.25
    attention_mask = torch.cat([prompt_mask, response_attention], dim=-1).long()
    shape = (batch_size, RESPONSE_LEN)
    fields = {
        "input_ids": torch.randint(1, 100, (batch_size, PROMPT_LEN + RESPONSE_LEN), generator=generator),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "response_mask": response_mask.long(),
        "row_id": torch.arange(batch_size),
    }
    fields["prompts"] = fields["input_ids"][:, :PROMPT_LEN]
    fields["responses"] = fields["input_ids"][:, PROMPT_LEN:]
    for name in extra_fields:
        fields[name] = torch.randn(shape, generator=generator)
    return TensorDict(fields, batch_size=[batch_size])


def actor_inputs(
    batch_size: int, seed: int, noise_seed: int = 11, num_expert: int | None = None
) -> tuple[TensorDict, dict[str, torch.Tensor]]:
    """A rollout batch with holes in its masks and what a Trinity policy loss reads (old and reference log-probs, both
    negative, and advantages), and the actor's outputs for it: log-probs near the old ones (noise seeded with
    ``noise_seed``) and an entropy (seeded with ``noise_seed + 1``). With ``num_expert`` also the fields every
    registered loss selects: MIX's expert mask (the last ``num_expert`` rows) and the step; rows 2i, 2i+1 form DPO
    pair i."""
    batch = make_rollout_batch(
        batch_size, seed=seed, extra_fields=("old_log_probs", "ref_log_prob", "advantages"), holes_in_mask=True
    )
    noise = torch.randn(batch["old_log_probs"].shape, generator=torch.Generator().manual_seed(noise_seed))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    batch["ref_log_prob"] = -batch["ref_log_prob"].abs()
    if num_expert is not None:
        batch["expert_mask"] = torch.arange(batch_size) >= batch_size - num_expert
        batch["step"] = torch.full((batch_size,), 3)
    log_probs = batch["old_log_probs"] + 0.1 * noise
    entropy = torch.rand(log_probs.shape, generator=torch.Generator().manual_seed(noise_seed + 1))
    return batch, {"log_probs": log_probs, "entropy": entropy}


def pack_model_output(micro_batch: TensorDict, padded: torch.Tensor) -> torch.Tensor:
    """Lay out per-response-token outputs as the model returns them, one entry per valid token: verl reads response
    token t's output from the position before it (`no_padding_2_padding`), so each row's packed outputs are
    prompt_len - 1 zeros, its response's outputs, one zero. One scatter keeps the autograd link to ``padded``."""
    attention_mask = micro_batch["attention_mask"]
    prompt_lens = attention_mask[:, :PROMPT_LEN].sum(-1)
    response_lens = attention_mask[:, PROMPT_LEN:].sum(-1)
    lengths = prompt_lens + response_lens  # of each packed sequence
    starts = lengths.cumsum(0) - lengths
    positions = torch.arange(padded.shape[1])
    in_response = positions < response_lens[:, None]  # responses are right-padded
    destinations = (starts + prompt_lens - 1)[:, None] + positions
    return padded.new_zeros(int(lengths.sum())).scatter(0, destinations[in_response], padded[in_response])


@dataclass(frozen=True)
class Split:
    """How one rank's mini-batch is cut into micro-batches."""

    num_micro_batches: int
    dynamic: bool = False

    def __str__(self) -> str:
        return f"{'token-budget' if self.dynamic else 'fixed-size'}-K{self.num_micro_batches}"
