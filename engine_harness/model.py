"""A random Qwen2 built from a config in code and saved as a HF checkpoint: nothing is downloaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODEL_SEED = 1234


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen2 causal LM (untied embeddings)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    max_positions: int = 256


# the regression tests' model: 2 layers, hidden 64
TINY = ModelShape(layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=128)


def save_model(shape: ModelShape, path: Path) -> None:
    """Random weights from torch's global generator seeded with `MODEL_SEED`: the same checkpoint every time."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_positions,
        tie_word_embeddings=False,
    )
    torch.manual_seed(MODEL_SEED)
    Qwen2ForCausalLM(config).save_pretrained(path)
