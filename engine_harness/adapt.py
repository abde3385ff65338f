"""What verl's engine needs to run on a CPU-only or flash_attn-less machine: none of it is on the loss path."""

from __future__ import annotations


def unpad_helpers() -> str:
    """verl's flash_attn unpad helpers when flash_attn is installed; else its pure-torch ones. Says which."""
    try:
        import flash_attn  # noqa: F401

        return "flash_attn"
    except ImportError:
        from engine_harness.sim import use_cpu_unpadding

        use_cpu_unpadding()
        return "verl's pure-torch helpers (no flash_attn)"


def freeze_collector() -> None:
    """The engine's ``to()`` runs ``gc.collect()`` on entering and leaving train mode, once per step each; with
    torch, transformers and verl loaded every full collection walks millions of long-lived objects (half of each
    CPU step, measured). `gc.freeze` moves the objects alive after the imports and the engine builds out of the
    collector's view; later garbage is still collected, and nothing numeric changes."""
    import gc

    gc.collect()
    gc.freeze()


def wrap_policy() -> dict:
    """verl 0.7.x's ``apply_fsdp2`` indexes the model's ``_no_split_modules``, which transformers 5 makes a set: name
    the layers it wraps by default (0.8.0 reads the set itself)."""
    import verl

    if not verl.__version__.startswith("0.7."):
        return {}
    return {"wrap_policy": {"transformer_layer_cls_to_wrap": ["Qwen2DecoderLayer"]}}


def value_model_overrides(value_head: bool) -> dict:
    """verl 0.7.x's FSDP engine builds the critic from the checkpoint's own architecture (a value model is saved as a
    token classifier with one label); 0.8.0's builds a value head itself. The checkpoint is a causal LM: on 0.7.x its
    critic is configured as what a critic checkpoint would declare, with the dropout 0.8.0 sets for its value head
    (none: the classifier's default dropout would make every step's forward differ)."""
    import verl

    if not value_head or not verl.__version__.startswith("0.7."):
        return {}
    return {"architectures": ["Qwen2ForTokenClassification"], "num_labels": 1, "classifier_dropout": 0.0}


# what a rank without flash_attn (or in fp32, which flash_attn refuses) names for Ulysses (`ulysses_sdpa_attention`)
ULYSSES_SDPA_ATTENTION = "ulysses_sdpa"


def ulysses_sdpa_attention() -> None:
    """Ulysses sequence parallelism without flash_attn, under the ``attn_implementation`` `ULYSSES_SDPA_ATTENTION`.

    verl's Ulysses all-to-all runs only in transformers' flash-attention entry (with sdpa each rank would attend within
    its own slice): the name routes there, and flash_attn's varlen kernel after the all-to-all (CUDA, half precision
    only) becomes causal sdpa over each packed sequence, cut where its positions restart at 0 (flash_attn's
    ``cu_seqlens``). verl's all-to-all, `Gather` and the loss run unchanged."""
    import torch
    import verl.models.transformers.monkey_patch as verl_monkey_patch
    from transformers import AttentionInterface
    from transformers.integrations.flash_attention import flash_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    def varlen_attention(query, key, value, attention_mask, query_length, *args, position_ids=None, **kwargs):
        # query (1, total, heads, dim), key and value (1, total, kv heads, dim); one packed row
        assert query.size(0) == 1 and attention_mask is None and position_ids is not None, "packed rows only"
        starts = torch.nonzero(position_ids[0] == 0).flatten().tolist()
        output = torch.empty_like(query)
        for start, end in zip(starts, [*starts[1:], query.size(1)], strict=True):
            q, k, v = (t[:, start:end].transpose(1, 2) for t in (query, key, value))
            attended = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=kwargs.get("softmax_scale"), enable_gqa=True
            )
            output[:, start:end] = attended.transpose(1, 2)
        return output

    AttentionInterface.register(ULYSSES_SDPA_ATTENTION, flash_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ULYSSES_SDPA_ATTENTION, flash_attention_mask)
    verl_monkey_patch._flash_attention_forward = varlen_attention
