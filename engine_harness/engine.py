"""verl's FSDP2 engine, built the way its workers build it, and one complete `train_batch` step: zero_grad, the
engine's micro-batch loop, the FSDP gradient reduction, and `optimizer_step`, which returns the pre-clip grad_norm."""

from __future__ import annotations

import contextlib
import importlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine_harness.losses import engine_modules
from engine_harness.model import MODEL_SEED


@dataclass(frozen=True)
class OptimizerSettings:
    """verl's `FSDPOptimizerConfig` (AdamW) fields the harness sets, None for verl's default. The default learning
    rate is 0: the weights never move, and every step sees the same model."""

    lr: float | None = 0.0
    clip_grad: float = 1.0
    weight_decay: float | None = 0.0
    total_training_steps: int = 10

    def config_fields(self) -> dict[str, Any]:
        return {name: value for name, value in asdict(self).items() if value is not None}  # None: verl's default


@dataclass(frozen=True)
class StepResult:
    """One `train_batch`: the pre-clip grad_norm (NaN on a rank that does not report it), each micro-batch's loss,
    and the step's time (`step_clock`), what the worker does to the mini-batch before it included (``pre_pass``: that
    part of it)."""

    grad_norm: float
    losses: tuple[float, ...]
    seconds: float
    pre_pass: float = 0.0

    @property
    def micro_batches(self) -> int:
        """How many micro-batches the engine made."""
        return len(self.losses)

    @property
    def loss(self) -> float:
        """The mini-batch's loss: the sum of the micro-batch losses, each already scaled to its share."""
        return sum(self.losses)


def build_engine(
    loss: str,
    model_path: Path,
    attention: str = "sdpa",
    compute_dtype: str = "fp32",
    optimizer: OptimizerSettings | None = None,
    sequence_parallel: int = 1,
) -> Any:
    """The engine verl trains ``loss`` with, initialized on every rank of the process group: fp32 master weights and
    gradient reduction; ``compute_dtype`` "bf16" is verl's default mixed precision; ``sequence_parallel`` is verl's
    ``ulysses_sequence_parallel_size`` (its data-parallel size is the world's over it)."""
    import torch
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    from engine_harness.adapt import value_model_overrides, wrap_policy
    from engine_harness.sim import every_rank_loads_weights

    value_head = loss == "critic"
    model_config = HFModelConfig(
        path=str(model_path),
        load_tokenizer=False,
        use_remove_padding=True,
        override_config={"attn_implementation": attention, **value_model_overrides(value_head)},
    )
    engine_config = FSDPEngineConfig(
        strategy="fsdp2",
        model_dtype="fp32",
        mixed_precision={"param_dtype": compute_dtype, "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        use_torch_compile=False,
        forward_only=False,
        ulysses_sequence_parallel_size=sequence_parallel,
        **wrap_policy(),
    )
    model_config.model_type = "value_model" if value_head else "language_model"
    engine_class = FSDPEngineWithValueHead if value_head else FSDPEngineWithLMHead
    engine = engine_class(
        model_config=model_config,
        engine_config=engine_config,
        optimizer_config=FSDPOptimizerConfig(**(optimizer or OptimizerSettings()).config_fields()),
        checkpoint_config=CheckpointConfig(),
    )
    # the critic's value head (`score`) is not in the checkpoint: seed its initialization, so that every tree and
    # world size trains the same model (FSDP2 broadcasts rank 0's weights to the other ranks)
    torch.manual_seed(MODEL_SEED)
    with every_rank_loads_weights() if loss == "trinity" else contextlib.nullcontext():
        engine.initialize()
    torch.distributed.barrier()
    return engine


def step_clock(device: str) -> str:
    """What a step's time is: wall-clock time on a GPU (the device is the process's own); on CPU the CPU time of this
    process, so that time the OS gives to other processes of a shared machine is not counted."""
    return "wall" if device == "cuda" else "process CPU"


def train_step(
    engine: Any, data: Any, loss_function: Any, on_gpu: bool = False, before: Callable[[], None] | None = None
) -> StepResult:
    """One `train_batch` in train mode, timed by `step_clock`. ``before``: what the worker does to the mini-batch
    before the engine splits it (a patched worker's pre-pass forward, `engine_harness.worker_statistics`), run in the
    same train mode, as the worker runs both, and timed as part of the step: it is part of what an update costs."""
    import torch

    clock = time.perf_counter if on_gpu else time.process_time
    pre_pass = 0.0
    with engine.train_mode():
        if on_gpu:
            torch.cuda.synchronize()
        started = clock()
        if before is not None:
            before()
            if on_gpu:
                torch.cuda.synchronize()
            pre_pass = clock() - started
        output = engine.train_batch(data, loss_function=loss_function)
        # only the first rank of each Ulysses group reports (`is_mp_src_rank_with_outputs`); the others get NaN
        grad_norm = float(output["metrics"].get("grad_norm", math.nan))
        if on_gpu:
            torch.cuda.synchronize()
        seconds = clock() - started
    return StepResult(grad_norm, tuple(float(loss) for loss in output["loss"]), seconds, pre_pass)


def module_files(losses: Sequence[str]) -> dict[str, str]:
    """Where the engine and loss modules this process used come from (checked against the trees claimed)."""
    return {name: str(Path(importlib.import_module(name).__file__ or "").resolve()) for name in engine_modules(losses)}
