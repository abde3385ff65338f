"""A random Qwen2 built from a config in code and saved as a HF checkpoint: nothing is downloaded."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

MODEL_SEED = 1234


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen2 causal LM, named as `Qwen2Config` names them."""

    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int = 256


# the regression tests' model: 2 layers, hidden 64
TINY = ModelShape(2, 64, 128, 4, 2, 128)


def save_model(shape: ModelShape, path: Path) -> None:
    """Random weights from torch's global generator seeded with `MODEL_SEED` (untied embeddings): the same checkpoint
    every time."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(MODEL_SEED)
    Qwen2ForCausalLM(Qwen2Config(**asdict(shape), tie_word_embeddings=False)).save_pretrained(path)
