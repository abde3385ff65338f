"""Worker for the end-to-end engine test: real verl FSDP2 engines training a tiny Qwen2 on CPU.

One call of `run_world` starts ``world_size`` processes that form one gloo process group, forked from a fork server
that imported torch and the engine and loss modules from the trees under test once; every process builds the engines
once, and then runs, for each ``loss_agg_mode`` and each token budget, one complete `BaseEngine.train_batch` step
(zero_grad, the engine's micro-batch loop with ``loss.backward()`` per micro-batch, `optimizer_step`) and records
the pre-clip ``grad_norm`` it returns. The learning rate is 0, so the weights never move and every step
sees the same model: only the micro-batch split differs between the steps of one mode.

The adaptations needed on a CPU-only machine are all outside the loss path; they are listed in
`test_engine_e2e`'s docstring, and each is applied by one function of `engine_harness.adapt`, or of this module
(`_fp32_forward_on_verl_0_7`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from engine_harness import LOSS_AGG_MODES
from engine_harness.adapt import (
    ULYSSES_SDPA_ATTENTION,
    freeze_collector,
    ulysses_sdpa_attention,
    unpad_helpers,
)
from engine_harness.data import rollout_global_batch, step_data, token_budget, with_teacher
from engine_harness.engine import build_engine, module_files, train_step
from engine_harness.losses import engine_modules
from engine_harness.losses import loss_function as loss_function_for
from engine_harness.model import TINY, save_model
from engine_harness.sim import Split, load_value_head_with_config_attention
from patchset.plumbing.children import run_children

MICRO_BATCHES = (1, 2, 4)
WORLD_DEADLINE_S = 600  # one world's whole matrix: about 20 s of CPU; a rank past this is stuck, and killed
COMPONENTS = ("critic", "actor")
# verl's on-policy distillation loss (supervised k3, task rewards off): needs no Trinity; it runs before the actor,
# whose Trinity engine patch would otherwise be in place
DISTILLATION = "distillation"
GLOBAL_BATCH_SIZE = 24  # sequences per mini-batch, over all ranks (not 16: that is the response length)
# the harness's loss for each component
LOSSES = {"critic": "critic", DISTILLATION: "distillation", "actor": "trinity"}
# `run_world` may run in several threads at once (one per world size); torch's global generator is per process
_GLOBAL_RNG = threading.Lock()


def _fp32_forward_on_verl_0_7() -> None:
    """verl 0.7.x's FSDP ``forward_step`` autocasts to bf16 whatever the engine's dtype (0.8.0 follows the parameter
    dtype, fp32 here), so every micro-batch composition rounds differently; in this rank process autocast is a no-op
    there, and the forward runs in fp32, as on 0.8.0."""
    import contextlib

    import torch
    import verl

    if verl.__version__.startswith("0.7."):
        torch.autocast = lambda *args, **kwargs: contextlib.nullcontext()  # type: ignore[assignment,misc]


@dataclass(frozen=True)
class Shape:
    """A process group's shape: its ranks, verl's Ulysses size (``ulysses_sequence_parallel_size``; the data-parallel
    size is the world's over it) and the model's attention (`ULYSSES_SDPA_ATTENTION`: verl's Ulysses attention, its
    all-to-all around a pure-torch kernel, which every sp > 1 needs)."""

    world_size: int
    sequence_parallel: int = 1
    attention: str = "sdpa"

    @property
    def data_parallel(self) -> int:
        return self.world_size // self.sequence_parallel


@dataclass(frozen=True)
class Measurement:
    """One engine step: the grad_norm `optimizer_step` returned for one loss, mode and split (rank 0's), with the
    shape's Ulysses size and the step's CPU seconds on this rank."""

    component: str
    mode: str
    world_size: int
    micro_batches: int
    grad_norm: float
    sequence_parallel: int = 1
    seconds: float = 0.0


def _run_component(
    component: str,
    model_path: Path,
    rank: int,
    shape: Shape,
    micro_batch_counts: Sequence[int],
    modes: Sequence[str],
) -> list[Measurement]:
    loss = LOSSES[component]
    world_size, sp = shape.world_size, shape.sequence_parallel
    engine = build_engine(loss, model_path, attention=shape.attention, sequence_parallel=sp)
    freeze_collector()
    global_batch = rollout_global_batch(TINY.vocab_size, GLOBAL_BATCH_SIZE)
    if component == DISTILLATION:  # the teacher's log-probs of the whole mini-batch
        global_batch = with_teacher(global_batch, TINY.vocab_size)
    measurements = []
    for mode in modes:
        loss_function = loss_function_for(loss, mode)
        for micro_batches in micro_batch_counts:
            if component == DISTILLATION:  # every step is a fresh worker's first call
                loss_function = loss_function_for(loss, mode)
            split = Split(micro_batches, dynamic=True)
            data = step_data(global_batch, rank, world_size, split, loss, sequence_parallel=sp)
            step = train_step(engine, data, loss_function)
            budget = -(-token_budget(global_batch, shape.data_parallel, micro_batches) // sp)  # per rank
            assert step.micro_batches == micro_batches, (
                f"budget {budget} gave {step.micro_batches} micro-batches, wanted {micro_batches}"
            )
            measurement = Measurement(component, mode, world_size, micro_batches, step.grad_norm, sp, step.seconds)
            measurements.append(measurement)
    return measurements


def _worker(
    rank: int,
    shape: Shape,
    workdir: str,
    sys_path: Sequence[str],
    components: Sequence[str],
    micro_batch_counts: Sequence[int],
    modes: Sequence[str],
) -> None:
    # the trees under test first, whatever the fork server's start copied over from the parent
    sys.path[:] = [*sys_path, *(entry for entry in sys.path if entry not in sys_path)]
    result_file = Path(workdir) / f"rank{rank}.json"
    world_size = shape.world_size
    try:
        import torch

        # OMP_NUM_THREADS where set (the test command sets 1: the ranks and the steps running beside them are the
        # parallelism), else the cores shared among the ranks
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // world_size)))
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=world_size
        )
        unpad_helpers()
        _fp32_forward_on_verl_0_7()
        load_value_head_with_config_attention()
        if shape.attention == ULYSSES_SDPA_ATTENTION:
            ulysses_sdpa_attention()
        started = time.perf_counter()
        measurements: list[Measurement] = []
        for component in components:
            if component == "actor":
                from trinity.trainer.verl.monkey_patch import patch_verl_engine

                patch_verl_engine()
            model_path = Path(workdir) / "model"
            measurements += _run_component(component, model_path, rank, shape, micro_batch_counts, modes)
        result = {
            "measurements": [asdict(m) for m in measurements],
            "modules": module_files([LOSSES[component] for component in components]),
            "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time(),  # the rank's whole life: its engine builds and steps
        }
        torch.distributed.destroy_process_group()
    except BaseException:
        result = {"error": traceback.format_exc()}
    result_file.write_text(json.dumps(result))


def preload_modules(components: Sequence[str]) -> list[str]:
    """What the fork server imports once, before any rank is forked from it: torch and the engine and loss modules.
    Each rank is then a fresh fork (its own process group, engines and Trinity patch), without importing them again;
    last, `engine_harness.fork_server_warmup` (the model classes every engine build imports, the collector frozen)."""
    modules = engine_modules([LOSSES[component] for component in components])
    return ["torch", "transformers", *modules, "engine_harness.fork_server_warmup"]


def run_world(
    world_size: int,
    sys_path: Sequence[str],
    components: Sequence[str] = COMPONENTS,
    micro_batch_counts: Sequence[int] = MICRO_BATCHES,
    shape: Shape | None = None,
    modes: Sequence[str] = LOSS_AGG_MODES,
) -> list[dict]:
    """Start ``world_size`` ranks, run the matrix, and return each rank's result (measurements, module files);
    ``shape`` None: ``world_size`` data-parallel ranks with sdpa attention."""
    with tempfile.TemporaryDirectory(prefix="engine-e2e-") as workdir:
        with _GLOBAL_RNG:  # the model's weights come from torch's global generator: one seeded build at a time
            save_model(TINY, Path(workdir) / "model")
        shape = shape or Shape(world_size)
        args = (shape, workdir, list(sys_path), list(components), list(micro_batch_counts), list(modes))
        ranks = [(rank, *args) for rank in range(world_size)]
        codes = run_children(_worker, ranks, WORLD_DEADLINE_S, "engine rank", preload_modules(components))
        results = []
        for rank, code in enumerate(codes):
            result_file = Path(workdir) / f"rank{rank}.json"
            if not result_file.exists():
                results.append({"error": f"rank {rank} exited with code {code} and no result"})
            else:
                results.append(json.loads(result_file.read_text()))
        return results
