"""Worker for the end-to-end engine test: real verl FSDP2 engines training a tiny Qwen2 on CPU.

One call of `run_world` starts ``world_size`` processes that form one gloo process group, forked from a fork server
that imported torch and the engine and loss modules from the trees under test once; every process builds the engines
once, and then runs, for each ``loss_agg_mode`` and each token budget, one complete `BaseEngine.train_batch` step
(zero_grad, the engine's micro-batch loop with ``loss.backward()`` per micro-batch, `optimizer_step`) and records
the pre-clip ``grad_norm`` it returns. The learning rate is 0, so the weights never move and every step
sees the same model: only the micro-batch split differs between the steps of one mode.

The adaptations needed on a CPU-only machine are all outside the loss path; they are listed in
`test_engine_e2e`'s docstring, and each is applied by one function here (``_cpu_*``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from forking import run_children

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
MICRO_BATCHES = (1, 2, 4)
WORLD_DEADLINE_S = 600  # one world's whole matrix: about 20 s of CPU; a rank past this is stuck, and killed
COMPONENTS = ("critic", "actor")
# verl's on-policy distillation loss (supervised k3, task rewards off): needs no Trinity; it runs before the actor,
# whose Trinity engine patch would otherwise be in place
DISTILLATION = "distillation"
GLOBAL_BATCH_SIZE = 24  # sequences per mini-batch, over all ranks (not 16: that is the response length)
VOCAB_SIZE = 128
MODEL_SEED = 1234
DATA_SEED = 2024
# `run_world` may run in several threads at once (one per world size); torch's global generator is per process
_GLOBAL_RNG = threading.Lock()


@dataclass(frozen=True)
class Measurement:
    """One engine step: the grad_norm `optimizer_step` returned for one loss, mode and split."""

    component: str
    mode: str
    world_size: int
    micro_batches: int
    grad_norm: float


# ---------------------------------------------------------------------------------------------------------
# CPU adaptations (none of them is on the loss path)
# ---------------------------------------------------------------------------------------------------------


def _cpu_unpadding() -> None:
    """`left_right_2_no_padding` unpads through flash_attn: use verl's pure-torch equivalent."""
    from engine_sim import use_cpu_unpadding

    use_cpu_unpadding()


def _cpu_collector_freeze() -> None:
    """The engine's ``to()`` runs ``gc.collect()`` on entering and leaving train mode, once per step each; with
    torch, transformers and verl loaded every full collection walks millions of long-lived objects (half of each
    CPU step, measured). `gc.freeze` moves the objects alive after the imports and the engine builds out of the
    collector's view; later garbage is still collected, and nothing numeric changes."""
    import gc

    gc.collect()
    gc.freeze()


# ---------------------------------------------------------------------------------------------------------
# model, engines, data
# ---------------------------------------------------------------------------------------------------------


def save_tiny_model(path: Path) -> None:
    """A random 2-layer, hidden-64 Qwen2 saved as a HF checkpoint (built from a config: no download)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    torch.manual_seed(MODEL_SEED)
    Qwen2ForCausalLM(config).save_pretrained(path)


def _fp32_forward_on_verl_0_7() -> None:
    """verl 0.7.x's FSDP ``forward_step`` autocasts to bf16 whatever the engine's dtype (0.8.0 follows the parameter
    dtype, fp32 here), so every micro-batch composition rounds differently; in this rank process autocast is a no-op
    there, and the forward runs in fp32, as on 0.8.0. Not on the loss path."""
    import contextlib

    import torch
    import verl

    if verl.__version__.startswith("0.7."):
        torch.autocast = lambda *args, **kwargs: contextlib.nullcontext()  # type: ignore[assignment,misc]


def _wrap_policy() -> dict:
    """verl 0.7.x's ``apply_fsdp2`` indexes the model's ``_no_split_modules``, which transformers 5 makes a set: name
    the layers it wraps by default (0.8.0 reads the set itself)."""
    import verl

    if not verl.__version__.startswith("0.7."):
        return {}
    return {"wrap_policy": {"transformer_layer_cls_to_wrap": ["Qwen2DecoderLayer"]}}


def _value_model_overrides(component: str) -> dict:
    """verl 0.7.x's FSDP engine builds the critic from the checkpoint's own architecture (a value model is saved as a
    token classifier with one label); 0.8.0's builds a value head itself. The tiny checkpoint is a causal LM: on 0.7.x
    its critic is configured as what a critic checkpoint would declare, with the dropout 0.8.0 sets for its value
    head (none: the classifier's default dropout would make every step's forward differ)."""
    import verl

    if component != "critic" or not verl.__version__.startswith("0.7."):
        return {}
    return {"architectures": ["Qwen2ForTokenClassification"], "num_labels": 1, "classifier_dropout": 0.0}


def _build_engine(component: str, model_path: Path):
    import torch
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    model_config = HFModelConfig(
        path=str(model_path),
        load_tokenizer=False,
        use_remove_padding=True,
        override_config={"attn_implementation": "sdpa", **_value_model_overrides(component)},
    )
    engine_config = FSDPEngineConfig(
        strategy="fsdp2",
        model_dtype="fp32",
        mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        use_torch_compile=False,
        forward_only=False,
        **_wrap_policy(),
    )
    optimizer_config = FSDPOptimizerConfig(lr=0.0, weight_decay=0.0, clip_grad=1.0, total_training_steps=10)
    engine_class = FSDPEngineWithValueHead if component == "critic" else FSDPEngineWithLMHead
    model_config.model_type = "value_model" if component == "critic" else "language_model"
    engine = engine_class(
        model_config=model_config,
        engine_config=engine_config,
        optimizer_config=optimizer_config,
        checkpoint_config=CheckpointConfig(),
    )
    # the critic's value head (`score`) is not in the checkpoint: seed its initialization, so that every
    # world size trains the same model (FSDP2 broadcasts rank 0's weights to the other ranks)
    torch.manual_seed(MODEL_SEED)
    from engine_sim import every_rank_loads_weights

    with every_rank_loads_weights() if component == "actor" else contextlib.nullcontext():
        engine.initialize()
    torch.distributed.barrier()
    return engine


def _loss_function(component: str, mode: str):
    if component == "critic":
        from functools import partial

        from engine_sim import critic_model_fields
        from verl.workers.config import CriticConfig
        from verl.workers.utils.losses import value_loss

        config = CriticConfig(
            strategy="fsdp2",
            ppo_micro_batch_size_per_gpu=1,
            cliprange_value=0.2,
            loss_agg_mode=mode,
            **critic_model_fields(),
        )
        return partial(value_loss, config)
    if component == DISTILLATION:
        from functools import partial

        from engine_sim import actor_config as engine_actor_config
        from verl.trainer.distillation.losses import distillation_ppo_loss
        from verl.workers.config import DistillationConfig, DistillationLossConfig

        # a fresh worker's configs: verl keeps the global batch info on them between calls
        actor_config = engine_actor_config(mode, strategy="fsdp2")
        loss_config = DistillationLossConfig(loss_mode="k3", use_policy_gradient=False, use_task_rewards=False)
        distillation_config = DistillationConfig(distillation_loss=loss_config)
        return partial(distillation_ppo_loss, config=actor_config, distillation_config=distillation_config)
    from trinity.trainer.verl.losses import TrinityPolicyLoss
    from trinity_configs import algorithm_config

    return TrinityPolicyLoss(algorithm_config("grpo", mode))


def make_global_batch():
    """The whole mini-batch (all ranks), left-right padded as the trainer hands it over; same on every rank."""
    from engine_sim import make_rollout_batch

    fields = ("values", "returns", "old_log_probs", "ref_log_prob", "advantages")
    batch = make_rollout_batch(GLOBAL_BATCH_SIZE, seed=DATA_SEED, extra_fields=fields, holes_in_mask=True)
    # log-probs of a random model sit near -log(V): keep the PPO ratio inside the clip range
    base = -math.log(VOCAB_SIZE)
    batch["old_log_probs"] = base + 0.05 * batch["old_log_probs"]
    batch["ref_log_prob"] = base + 0.05 * batch["ref_log_prob"]
    batch["input_ids"] = batch["input_ids"] % VOCAB_SIZE
    batch["prompts"] = batch["input_ids"][:, : batch["prompts"].shape[1]]
    batch["responses"] = batch["input_ids"][:, batch["prompts"].shape[1] :]
    return batch


def _with_teacher(batch):
    """The batch with the teacher's log-prob of each token, one entry per position of the padded sequence (top-1),
    as verl's trainer attaches them for the single-sample estimators."""
    import torch

    generator = torch.Generator().manual_seed(DATA_SEED + 1)
    teacher = -math.log(VOCAB_SIZE) + 0.5 * torch.randn(*batch["input_ids"].shape, 1, generator=generator)
    batch["teacher_logprobs"] = teacher
    batch["teacher_ids"] = torch.zeros(teacher.shape, dtype=torch.long)
    return batch


def _rank_batch(global_batch, rank: int, world_size: int):
    rows = len(global_batch) // world_size
    return global_batch[rank * rows : (rank + 1) * rows]


def token_budget(global_batch, world_size: int, micro_batches: int) -> int:
    """Token budget per GPU that makes verl's dynamic batching cut each rank's batch into ``micro_batches``.

    verl makes ceil(rank tokens / budget) micro-batches and takes the maximum over ranks.
    """
    seq_lens = global_batch["attention_mask"].sum(-1)
    rank_tokens = [int(part.sum()) for part in seq_lens.chunk(world_size)]
    return max(max(-(-tokens // micro_batches) for tokens in rank_tokens), int(seq_lens.max()))


def _step_data(component: str, global_batch, rank: int, world_size: int, budget: int):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    if component == DISTILLATION:  # the teacher's log-probs of the whole mini-batch, then this rank's rows
        global_batch = _with_teacher(global_batch.clone())
    data = left_right_2_no_padding(_rank_batch(global_batch, rank, world_size).clone())
    tu.assign_non_tensor(
        data,
        temperature=1.0,
        use_remove_padding=True,
        use_fused_kernels=False,
        use_dynamic_bsz=True,
        max_token_len_per_gpu=budget,
        global_batch_size=GLOBAL_BATCH_SIZE,
        calculate_entropy=component == "actor",
    )
    return data


def _train_step(engine, data, loss_function) -> tuple[float, int]:
    """One `train_batch` in train mode; returns (grad_norm, number of micro-batches the engine made)."""
    with engine.train_mode():
        output = engine.train_batch(data, loss_function=loss_function)
    return float(output["metrics"]["grad_norm"]), len(output["loss"])


def _run_component(
    component: str, model_path: Path, rank: int, world_size: int, micro_batch_counts: Sequence[int]
) -> list[Measurement]:
    engine = _build_engine(component, model_path)
    _cpu_collector_freeze()
    global_batch = make_global_batch()
    measurements = []
    for mode in LOSS_AGG_MODES:
        loss_function = _loss_function(component, mode)
        for micro_batches in micro_batch_counts:
            if component == DISTILLATION:  # every step is a fresh worker's first call
                loss_function = _loss_function(component, mode)
            budget = token_budget(global_batch, world_size, micro_batches)
            data = _step_data(component, global_batch, rank, world_size, budget)
            grad_norm, made = _train_step(engine, data, loss_function)
            assert made == micro_batches, f"budget {budget} gave {made} micro-batches, wanted {micro_batches}"
            measurements.append(Measurement(component, mode, world_size, micro_batches, grad_norm))
    return measurements


def engine_module_files(components: Sequence[str]) -> dict[str, str]:
    """Where the engine and loss modules this process used come from."""
    import importlib

    names = ["verl.workers.engine.fsdp.transformer_impl", "verl.workers.utils.losses"]
    if DISTILLATION in components:
        names += ["verl.trainer.distillation.losses"]
    if "actor" in components:
        names += ["trinity.trainer.verl.losses", "trinity.trainer.verl.monkey_patch"]
    return {name: str(Path(importlib.import_module(name).__file__ or "").resolve()) for name in names}


def _worker(
    rank: int,
    world_size: int,
    workdir: str,
    sys_path: Sequence[str],
    components: Sequence[str],
    micro_batch_counts: Sequence[int],
) -> None:
    # the trees under test first, whatever the fork server's start copied over from the parent
    sys.path[:] = [*sys_path, *(entry for entry in sys.path if entry not in sys_path)]
    result_file = Path(workdir) / f"rank{rank}.json"
    try:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        torch.distributed.init_process_group(
            "gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=world_size
        )
        _cpu_unpadding()
        _fp32_forward_on_verl_0_7()
        from engine_sim import load_value_head_with_config_attention

        load_value_head_with_config_attention()
        started = time.perf_counter()
        measurements: list[Measurement] = []
        for component in components:
            if component == "actor":
                from trinity.trainer.verl.monkey_patch import patch_verl_engine

                patch_verl_engine()
            measurements += _run_component(component, Path(workdir) / "model", rank, world_size, micro_batch_counts)
        result = {
            "measurements": [asdict(m) for m in measurements],
            "modules": engine_module_files(components),
            "seconds": time.perf_counter() - started,
        }
        torch.distributed.destroy_process_group()
    except BaseException:
        result = {"error": traceback.format_exc()}
    result_file.write_text(json.dumps(result))


def preload_modules(components: Sequence[str]) -> list[str]:
    """What the fork server imports once, before any rank is forked from it: torch and the engine and loss modules.
    Each rank is then a fresh fork (its own process group, engines and Trinity patch), without importing them again."""
    names = ["torch", "transformers", "verl.workers.engine.fsdp.transformer_impl", "verl.workers.utils.losses"]
    if DISTILLATION in components:
        names += ["verl.trainer.distillation.losses"]
    if "actor" in components:
        names += ["trinity.trainer.verl.losses", "trinity.trainer.verl.monkey_patch"]
    return names


def run_world(
    world_size: int,
    sys_path: Sequence[str],
    components: Sequence[str] = COMPONENTS,
    micro_batch_counts: Sequence[int] = MICRO_BATCHES,
) -> list[dict]:
    """Start ``world_size`` ranks, run the matrix, and return each rank's result (measurements, module files)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="engine-e2e-") as workdir:
        with _GLOBAL_RNG:  # the model's weights come from torch's global generator: one seeded build at a time
            save_tiny_model(Path(workdir) / "model")
        context = mp.get_context("forkserver")
        context.set_forkserver_preload(preload_modules(components))
        args = (world_size, workdir, list(sys_path), list(components), list(micro_batch_counts))
        codes = run_children(_worker, [(rank, *args) for rank in range(world_size)], WORLD_DEADLINE_S, context)
        results = []
        for rank, code in enumerate(codes):
            result_file = Path(workdir) / f"rank{rank}.json"
            if code is None:
                results.append({"error": f"rank {rank} was still running after {WORLD_DEADLINE_S} s: killed"})
            elif not result_file.exists():
                results.append({"error": f"rank {rank} exited with code {code} and no result"})
            else:
                results.append(json.loads(result_file.read_text()))
        return results
