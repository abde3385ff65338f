"""A tiny causal LM for the legacy actor's remove-padding path, with an attention layer run through verl's Ulysses
sequence parallelism, and an optimizer that records what FSDP averaged.

With ``ulysses_sequence_parallel_size`` > 1, Trinity's legacy ``_forward_micro_batch`` (as verl's) packs the rows of
a micro-batch into one sequence, pads it to a multiple of sp and gives each rank of the sp group its slice
(``ulysses_pad_and_slice_inputs``); the model gathers the whole sequence for attention and scatters it back with
verl's all-to-all (``gather_seq_scatter_heads`` / ``gather_heads_scatter_seq``, as verl's monkey-patched attention
does); the actor gathers the log-probs with verl's ``gather_outputs_and_unpad``, whose ``Gather.backward`` multiplies
the gradient by sp. The one adaptation, on the test side: the attention kernel is plain torch (verl's patched
attention calls flash_attn's varlen kernel, which needs CUDA), causal within each packed row (``cu_seq_lens_q``).
Without an sp group (sp 1) the all-to-alls are the identity, so the same model gives the one-process reference.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple

import torch

VOCAB, HIDDEN, HEADS = 64, 8, 2  # HEADS divisible by the sp sizes tested (verl's validate_ulysses_config)


class Output(NamedTuple):
    """The model's output: a pytree (as transformers' outputs are), so that FSDP2 finds the tensors its backward
    hooks go on."""

    logits: torch.Tensor


class UlyssesTinyLM(torch.nn.Module):
    """Token embedding, one attention layer over the packed rows, and a head: logits per packed token."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)

        def weight(*shape: int, scale: float = 1.0) -> torch.nn.Parameter:
            return torch.nn.Parameter(torch.randn(*shape, generator=generator) * scale)

        self.embed = weight(VOCAB, HIDDEN)
        self.qkv = weight(HIDDEN, 3 * HIDDEN, scale=HIDDEN**-0.5)
        self.out = weight(HIDDEN, HIDDEN, scale=HIDDEN**-0.5)
        self.head = weight(HIDDEN, VOCAB, scale=HIDDEN**-0.5)
        self.config = SimpleNamespace()  # a text model: no vision_config (the actor looks)

    def forward(self, input_ids, position_ids=None, cu_seq_lens_q=None, **_):
        from verl.utils.ulysses import gather_heads_scatter_seq, gather_seq_scatter_heads

        hidden = torch.tanh(self.embed[input_ids])  # (1, local tokens, HIDDEN)
        local = hidden.shape[1]
        q, k, v = (hidden @ self.qkv).view(1, local, 3, HEADS, HIDDEN // HEADS).unbind(2)
        # the whole packed sequence, this rank's heads (verl's all-to-all; the identity without an sp group)
        q, k, v = (gather_seq_scatter_heads(x, seq_dim=1, head_dim=2) for x in (q, k, v))
        attended = _packed_causal_attention(q, k, v, cu_seq_lens_q)
        attended = gather_heads_scatter_seq(attended, head_dim=2, seq_dim=1)  # back to this rank's tokens
        hidden = hidden + attended.reshape(1, local, HIDDEN) @ self.out
        return Output(logits=hidden @ self.head)


def _packed_causal_attention(q, k, v, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """Causal attention within each packed row, (1, tokens, heads, dim) each: what flash_attn's varlen kernel
    computes, in plain torch."""
    tokens = q.shape[1]
    row = torch.searchsorted(cu_seqlens[1:], torch.arange(tokens, dtype=cu_seqlens.dtype), right=True)
    position = torch.arange(tokens)
    allowed = (row[:, None] == row[None, :]) & (position[None, :] <= position[:, None])
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / q.shape[-1] ** 0.5
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return torch.einsum("bhqk,bkhd->bqhd", weights, v)


class FSDPRecordingOptimizer(torch.optim.SGD):
    """lr 0: at every optimizer step records the full gradient of an FSDP2-sharded model (its gradients are
    already FSDP's average over the mesh), and never moves the weights."""

    def __init__(self, params) -> None:
        super().__init__(params, lr=0.0)
        self.gradients: list[torch.Tensor] = []

    def step(self, closure=None):
        grads = [p.grad.full_tensor().flatten() for group in self.param_groups for p in group["params"]]
        self.gradients.append(torch.cat(grads).clone())


def sharded(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """The model sharded by FSDP2 over ``mesh`` (the legacy worker's device mesh: every rank, sp ranks included)."""
    from torch.distributed.fsdp import fully_shard

    fully_shard(model, mesh=mesh)
    return model
