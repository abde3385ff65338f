"""What one run measures: the settings the main process plans, and every tree's process and rank reads.

Plain data (no torch, no verl): the main process writes them to a JSON file for each tree's process, which hands
them on to its ranks.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    """One run of the proof, the same for both trees."""

    cases: tuple[str, ...]  # names of `cases.CASES`
    precisions: tuple[str, ...]  # of `cases.PRECISIONS`
    model: str  # a name of `cases.MODELS`
    model_path: Path  # the random model's checkpoint: the first tree's process saves it, every rank loads it
    world_size: int  # ranks, one per device
    device: str  # "cuda" or "cpu"
    attention: str  # the model's attn_implementation
    micro_batches: tuple[int, ...]  # per rank: 1 and the splits to compare with it
    splits: tuple[str, ...]  # of `cases.SPLIT_KINDS`
    repeats: int  # timed steps per split (single-step proof)
    steps: int = 1  # optimizer steps per run; above 1, the training runs
    clips: tuple[float | None, ...] = (1.0,)  # with steps above 1: clip_grad values, None for off
    lr: float | None = None  # with steps above 1: the learning rate (None: verl's default)
    sp: int = 1  # Ulysses sequence-parallel size
    timeout: float | None = None  # seconds the ranks of one tree may take (None: the side's own limit)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "model_path": str(self.model_path)})

    @classmethod
    def from_json(cls, text: str) -> Settings:
        fields = json.loads(text)
        sequences = ("cases", "precisions", "micro_batches", "splits", "clips")
        return cls(
            **{**fields, "model_path": Path(fields["model_path"]), **{name: tuple(fields[name]) for name in sequences}}
        )
