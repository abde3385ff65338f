"""One rank of the GPU proof: per case and precision, complete `train_batch` steps of verl's real FSDP2 engine with the
tree's own loss, one per split of the same mini-batch at learning rate 0, so that only the split differs. What is
measured, and the adaptations (none on the loss path): docs/gpu-proof.md."""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import sys
import traceback
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from engine_harness.adapt import ULYSSES_SDPA_ATTENTION, freeze_collector, ulysses_sdpa_attention, unpad_helpers
from engine_harness.data import step_data, with_teacher
from engine_harness.engine import OptimizerSettings, StepResult, build_engine, module_files, step_clock, train_step
from engine_harness.losses import loss_function
from engine_harness.sim import Split, load_value_head_with_config_attention
from engine_harness.worker_statistics import before_split
from patchset.proof import trajectory
from patchset.proof.cases import CASES, MODELS, Case, Settings, global_batch_size

LOSS_AGG_MODE = "token-mean"


def _step(engine, batch, split: Split, case: Case, settings: Settings, rank: int, budget=None, update=0) -> StepResult:
    """One `train_step` of ``engine`` on this rank's rows of ``batch`` cut by ``split``, as the ``update``-th of a
    run (``budget``: the run's token budget), with a fresh loss (distillation's is a first call) and the worker's
    pre-pass timed with the step."""
    data = step_data(batch, rank, settings.world_size, split, case.name, budget, sequence_parallel=settings.sp)
    loss = loss_function(case.name, LOSS_AGG_MODE)
    before = partial(before_split, case.name, engine, data, loss, update)
    return train_step(engine, data, loss, on_gpu=settings.device == "cuda", before=before)


def _splits(settings: Settings) -> list[tuple[str, int]]:
    """Each split compared with one micro-batch per rank: (kind, K) for every K above 1."""
    return [(split, k) for split in settings.splits for k in settings.micro_batches if k > 1]


def _mini_batches(case: Case, settings: Settings) -> list:
    """The training runs' pool of mini-batches (`mini_batch_pool`), with the teacher's log-probs for distillation; its
    first is the single-step proof's mini-batch."""
    model = MODELS[settings.model]
    sequences = global_batch_size(model, settings.world_size // settings.sp, settings.micro_batches)
    pool = trajectory.mini_batch_pool(model.shape.vocab_size, sequences, model.prompt_len, model.response_len)
    return [with_teacher(batch, model.shape.vocab_size) for batch in pool] if case.name == "distillation" else pool


def _run_case(case: Case, precision: str, settings: Settings, rank: int) -> list[dict]:
    engine = build_engine(case.name, settings.model_path, settings.attention, precision, sequence_parallel=settings.sp)
    freeze_collector()
    global_batch = _mini_batches(case, settings)[0]
    _step(engine, global_batch, Split(1), case, settings, rank)  # warm-up, not recorded (allocations, kernels)
    rows = []
    for split, micro_batches in [trajectory.REFERENCE, *_splits(settings)]:
        cut = Split(micro_batches, split == "dynamic")
        runs = [_step(engine, global_batch, cut, case, settings, rank) for _ in range(settings.repeats)]
        rows.append(_measurement(case, precision, split, micro_batches, runs))
    del engine
    _release_engine()
    return rows


def _measurement(case: Case, precision: str, split: str, micro_batches: int, runs: list[StepResult]) -> dict:
    """The single-step proof's row of one split: the first step's grad_norm and micro-batches, every step's time."""
    first = runs[0]
    row = {"case": case.name, "precision": precision, "split": split, "micro_batches": micro_batches}
    times = {"seconds": [r.seconds for r in runs], "pre_pass": [r.pre_pass for r in runs]}
    return {**row, "grad_norm": first.grad_norm, "made": first.micro_batches, **times}


def _release_engine() -> None:
    """After an engine is dropped: collect it (the collector was frozen after its build) and free its GPU memory."""
    import torch

    gc.unfreeze()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _run_trajectories(case: Case, precision: str, settings: Settings, rank: int) -> tuple[list[dict], list[dict]]:
    """``--steps N``: for each clipping setting, the reference (K = 1), K = 1 shuffled, then each split, N optimizer
    steps each from the same start on the same pool of mini-batches (`trajectory`). Returns (runs, single-step rows):
    the first step of each run of the first clipping setting is also the single-step proof's measurement."""
    steps, clips, sp = settings.steps, settings.clips, settings.sp
    optimizer = OptimizerSettings(lr=settings.lr, weight_decay=None, total_training_steps=steps)
    dp = settings.world_size // sp
    engine = build_engine(
        case.name, settings.model_path, settings.attention, precision, optimizer, sequence_parallel=sp
    )
    freeze_collector()
    start = trajectory.EngineStart.of(engine)
    used = engine.optimizer.defaults  # what verl built: AdamW with its defaults, but for what was asked
    optimizer_used = (
        f"{type(engine.optimizer).__name__} lr={used['lr']:g} betas={tuple(used['betas'])} "
        f"weight_decay={used['weight_decay']:g} eps={used['eps']:g}"
    )
    pool = _mini_batches(case, settings)
    _step(engine, pool[0], Split(1), case, settings, rank)  # warm-up, not recorded; its update is undone
    runs, single = [], []
    for clip in clips:
        engine.optimizer_config.clip_grad = math.inf if clip is None else clip
        reference = None
        for split, micro_batches in [trajectory.REFERENCE, trajectory.SHUFFLED, *_splits(settings)]:
            start.restore(engine)
            # per rank: the engine cuts a data-parallel group's rows by budget x sp
            budget = -(-trajectory.pool_budget(pool, dp, micro_batches) // sp) if split == "dynamic" else None
            cut, results = Split(micro_batches, split == "dynamic"), []
            for index in range(steps):  # step i of every run: one draw (Clip-Cov's)
                batch = pool[index % len(pool)]
                batch = trajectory.shuffled_rows(batch, dp) if split == "shuffled" else batch
                results.append(_step(engine, batch, cut, case, settings, rank, budget, index))
            end = trajectory.weights(engine)
            reference = end if reference is None else reference
            distance = 0.0 if end is reference else trajectory.relative_distance(end, reference, start.weights)
            trained = tuple(trajectory.Step(r.loss, r.grad_norm, r.micro_batches) for r in results)
            run = trajectory.Run(case.name, precision, clip, split, micro_batches, trained, distance, optimizer_used)
            runs.append(asdict(run))
            if clip == clips[0] and split != "shuffled":
                single.append(_measurement(case, precision, split, micro_batches, results))
    start.restore(engine)
    del engine, start
    _release_engine()
    return runs, single


def _environment(device: str, world_size: int, sp: int, backend: str, unpad: str, attention: str) -> dict[str, Any]:
    import torch
    import transformers

    verl_dir = Path(sys.modules["verl"].__file__ or "").parent
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name() if device == "cuda" else f"CPU ({os.cpu_count()} cores)",
        "world_size": world_size,
        "sp": sp,
        "backend": backend,
        "unpad": unpad,
        "attention": attention,
        "step_clock": step_clock(device),
        "verl": (verl_dir / "version" / "version").read_text().strip(),
    }
    # the offline helper's placeholders (scripts/gpu_offline), if they stood in for ray or wandb here
    info["standins"] = [name for name in ("ray", "wandb") if getattr(sys.modules.get(name), "STANDIN", False)]
    if "trinity" in sys.modules:
        info["trinity"] = sys.modules["trinity"].__version__
    return info


def run_rank(rank: int, settings: Settings, workdir: str) -> None:
    """Run every case and precision of ``settings`` on this rank; write ``rank<N>.json`` (measurements on rank 0)."""
    world_size = settings.world_size
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    try:
        import torch

        if settings.device == "cuda":
            torch.cuda.set_device(rank)
            backend = "cpu:gloo,cuda:nccl"
        else:
            backend = "gloo"
        torch.distributed.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size)
        unpad = unpad_helpers()
        load_value_head_with_config_attention()
        if settings.attention == ULYSSES_SDPA_ATTENTION:
            ulysses_sdpa_attention()
        rows: list[dict] = []
        trajectories: list[dict] = []
        for name in settings.cases:
            case = CASES[name]
            if name == "trinity":  # Trinity's actor loss runs on the engine Trinity patches
                from trinity.trainer.verl.monkey_patch import patch_verl_engine

                patch_verl_engine()
            for precision in settings.precisions:
                if settings.steps > 1:
                    runs, single = _run_trajectories(case, precision, settings, rank)
                    trajectories += runs
                    rows += single
                else:
                    rows += _run_case(case, precision, settings, rank)
        result = {
            "measurements": rows if rank == 0 else [],
            "trajectories": trajectories if rank == 0 else [],
            "modules": module_files(settings.cases),
            "environment": _environment(settings.device, world_size, settings.sp, backend, unpad, settings.attention),
        }
        torch.distributed.destroy_process_group()
    except BaseException:
        result = {"error": traceback.format_exc()}
    (Path(workdir) / f"rank{rank}.json").write_text(json.dumps(result))
    if "error" in result and world_size > 1:
        # a non-zero exit makes torch.multiprocessing end the other ranks, which would wait in a collective forever
        raise SystemExit(1)
