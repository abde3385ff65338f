"""What the GPU proof measures, what each tree should show, and the settings of one run: plain data, for the main
process imports neither torch nor verl (nor does `engine_harness.model` at the top)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from engine_harness.model import TINY, ModelShape

SIDES = ("vanilla", "patched")
PRECISIONS = ("fp32", "bf16")
SPLIT_KINDS = ("fixed", "dynamic")
MICRO_BATCHES = (1, 2, 4)


class Expect(Enum):
    """What a tree's grad_norm does as a mini-batch is cut into more micro-batches per rank."""

    INVARIANT = "the same at every split"
    GROWS = "grows about K times with K micro-batches"
    DIFFERS = "differs from one micro-batch's"
    CHOOSES = "differs from one micro-batch's: another choice of tokens or another mean"


@dataclass(frozen=True)
class Case:
    """One loss trained through the engine verl trains it with (`engine_harness.engine.build_engine`)."""

    name: str
    title: str
    vanilla: Expect
    patch: str = ""  # the patch of the series that fixes it, for the report


# In the order the ranks run them: Trinity's `patch_verl_engine()` stays in place once applied, so it runs last.
CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case("critic", "verl critic value_loss", Expect.GROWS, patch="verl 0001"),
        # verl's own actor loss is split-invariant on both trees: it shows the engine path itself is sound
        Case("ppo", "verl actor ppo_loss (GRPO, vanilla policy loss)", Expect.INVARIANT),
        Case("geo_mean", "verl actor ppo_loss, policy_loss.loss_mode=geo_mean (GMPO)", Expect.GROWS, patch="verl 0003"),
        # each step a fresh worker's first call: vanilla normalizes it with the info of no mini-batch (verl#7200)
        Case("distillation", "verl distillation_ppo_loss (k3, first call)", Expect.DIFFERS, patch="verl 0002"),
        # the worker chooses over the mini-batch before the split (engine_harness.worker_statistics); vanilla's loss
        # chooses within each micro-batch: another choice, not another scale
        Case("kl_cov", "verl actor ppo_loss, policy_loss.loss_mode=kl_cov (KL-Cov)", Expect.CHOOSES, patch="verl 0006"),
        Case(
            "is_norm",
            "verl actor ppo_loss, bypass mode, REINFORCE, rollout_is_batch_normalize",
            Expect.CHOOSES,
            patch="verl 0007",
        ),
        Case("trinity", "Trinity-RFT TrinityPolicyLoss (GRPO)", Expect.GROWS, patch="Trinity 0001"),
    )
}


@dataclass(frozen=True)
class Model:
    """A Qwen2 built from a config in code (random weights, no download), and the mini-batch it trains on."""

    name: str
    shape: ModelShape
    sequences: int  # per mini-batch, over all ranks (rounded up to a multiple of 4 x world size)
    prompt_len: int  # longest prompt
    response_len: int  # longest response


MODELS: dict[str, Model] = {
    "tiny": Model("tiny", TINY, 64, 16, 48),
    "smoke": Model("smoke", TINY, 16, 8, 24),  # the test command's smoke run: a quarter of tiny's mini-batch
    # the larger run: 64 sequences of up to 980 tokens (about 32k tokens a mini-batch)
    "large": Model("large", ModelShape(8, 1024, 2816, 16, 4, 32000, max_position_embeddings=980), 64, 256, 724),
}


def expectation(side: str, case: Case) -> Expect:
    """The patched tree must be split-invariant in every case; the vanilla tree shows each case's bug (or none)."""
    return Expect.INVARIANT if side == "patched" else case.vanilla


def global_batch_size(model: Model, world_size: int, micro_batches: tuple[int, ...] = MICRO_BATCHES) -> int:
    """Sequences per mini-batch: the model's, rounded up so that every rank's rows cut into each count of equal
    micro-batches (the fixed split)."""
    unit = math.lcm(*micro_batches) * world_size
    return -(-model.sequences // unit) * unit


@dataclass(frozen=True)
class Settings:
    """One run of the proof, the same for both trees: the main process plans it and writes it to a JSON file for
    each tree's process, which hands it on to its ranks."""

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
