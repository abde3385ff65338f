"""One rank of the GPU proof: verl's real FSDP2 engines, the tree's own losses, complete `train_batch` steps.

Every rank builds, for each case and precision, the engine verl trains that loss with (`FSDPEngineWithValueHead` for
the critic, `FSDPEngineWithLMHead` for the actor losses), and runs one complete `BaseEngine.train_batch` step
(zero_grad, the engine's micro-batch loop with ``loss.backward()`` per micro-batch, the FSDP gradient reduction,
`optimizer_step`) per split of the same mini-batch: one micro-batch, then 2 and 4 per rank, cut to a fixed size
(``micro_batch_size_per_gpu``) and by a token budget (``use_dynamic_bsz``). It records the pre-clip ``grad_norm``
that `optimizer_step` returns and the time of each step. The learning rate is 0, so every step sees the same
weights and only the split differs.

Adaptations, none on the loss path (the losses, the micro-batch loop, backward, the reduction and `optimizer_step`
run as the trees ship them):

1. Without flash_attn (always on CPU), verl's unpad helpers point at the pure-torch ones verl ships
   (`verl.utils.npu_flash_attn_utils`); with flash_attn installed, verl's own are used.
2. The model config asks for ``--attention`` (sdpa by default); verl's `load_valuehead_model` hard-codes
   flash_attention_2 (which refuses fp32), so it is replaced by the same `AutoModelForTokenClassification` call with
   the config's attention.
3. While Trinity's `_build_module` builds the actor engine, `torch.cuda.get_device_capability` reports (0, 0): every
   rank loads the checkpoint itself (Trinity's non-Hopper path), with the config's attention.
4. The engine classes are built directly and `train_batch` gets the non-tensor fields verl's `TrainingWorker` and
   trainer would attach (``use_dynamic_bsz``, ``max_token_len_per_gpu`` or ``micro_batch_size_per_gpu``,
   ``global_batch_size``, ``temperature``, ...).
5. Once an engine is built, `gc.freeze()`: the engine's ``to()`` runs ``gc.collect()`` twice a step.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from gpuproof.cases import CASES, MODELS, Case, Model, global_batch_size

MODEL_SEED = 1234
DATA_SEED = 2024
LOSS_AGG_MODE = "token-mean"


# ---------------------------------------------------------------------------------------------------------
# adaptations (none on the loss path)
# ---------------------------------------------------------------------------------------------------------


def _unpad_helpers() -> str:
    """verl's flash_attn unpad helpers when flash_attn is installed; else its pure-torch ones."""
    try:
        import flash_attn  # noqa: F401

        return "flash_attn"
    except ImportError:
        import verl.utils.attention_utils as attention_utils
        import verl.utils.npu_flash_attn_utils as torch_impl

        functions = (torch_impl.index_first_axis, torch_impl.pad_input, torch_impl.rearrange, torch_impl.unpad_input)
        attention_utils._get_attention_functions = lambda: functions
        return "verl's pure-torch helpers (no flash_attn)"


# ---------------------------------------------------------------------------------------------------------
# model, data, engines, losses
# ---------------------------------------------------------------------------------------------------------


def save_model(model: Model, path: Path) -> None:
    """A random Qwen2 of the preset's shape, saved as a HF checkpoint (built from a config: no download)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=model.vocab,
        hidden_size=model.hidden,
        intermediate_size=model.intermediate,
        num_hidden_layers=model.layers,
        num_attention_heads=model.heads,
        num_key_value_heads=model.kv_heads,
        max_position_embeddings=max(256, model.prompt_len + model.response_len),
        tie_word_embeddings=False,
    )
    torch.manual_seed(MODEL_SEED)
    Qwen2ForCausalLM(config).save_pretrained(path)


def make_global_batch(model: Model, sequences: int):
    """The whole mini-batch (all ranks), left-right padded as verl's trainer hands it over: ragged prompts and
    responses, one advantage per sequence (GRPO), old and reference log-probs near a random model's -log(V) so the
    PPO ratio stays inside the clip range, the critic's values and returns."""
    import torch
    from tensordict import TensorDict

    generator = torch.Generator().manual_seed(DATA_SEED)
    prompt, response = model.prompt_len, model.response_len
    prompt_lens = torch.randint(1, prompt + 1, (sequences,), generator=generator)
    response_lens = torch.randint(1, response + 1, (sequences,), generator=generator)
    prompt_mask = torch.arange(prompt) >= prompt - prompt_lens[:, None]
    response_mask = torch.arange(response) < response_lens[:, None]
    attention_mask = torch.cat([prompt_mask, response_mask], dim=-1).long()
    input_ids = torch.randint(0, model.vocab, (sequences, prompt + response), generator=generator)
    shape = (sequences, response)
    base = -math.log(model.vocab)
    fields = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "prompts": input_ids[:, :prompt],
        "responses": input_ids[:, prompt:],
        "response_mask": response_mask.long(),
        "values": torch.randn(shape, generator=generator),
        "returns": torch.randn(shape, generator=generator),
        "advantages": torch.randn(sequences, 1, generator=generator).expand(shape).contiguous(),
        "old_log_probs": base + 0.05 * torch.randn(shape, generator=generator),
        "ref_log_prob": base + 0.05 * torch.randn(shape, generator=generator),
    }
    return TensorDict(fields, batch_size=[sequences])


def _with_teacher(batch, vocab: int):
    """The teacher's log-prob of each position (top-1), as verl's trainer attaches it for the k3 estimator."""
    import torch

    generator = torch.Generator().manual_seed(DATA_SEED + 1)
    batch = batch.clone()
    teacher = -math.log(vocab) + 0.5 * torch.randn(*batch["input_ids"].shape, 1, generator=generator)
    batch["teacher_logprobs"] = teacher
    batch["teacher_ids"] = torch.zeros(teacher.shape, dtype=torch.long)
    return batch


def token_budget(global_batch, world_size: int, micro_batches: int) -> int:
    """The token budget per rank that makes verl's dynamic batching cut every rank's rows into ``micro_batches``:
    verl makes ceil(tokens / budget) micro-batches, the most of any rank."""
    seq_lens = global_batch["attention_mask"].sum(-1)
    rank_tokens = [int(part.sum()) for part in seq_lens.chunk(world_size)]
    return max(max(-(-tokens // micro_batches) for tokens in rank_tokens), int(seq_lens.max()))


def _step_data(case: Case, global_batch, rank: int, world_size: int, split: str, micro_batches: int):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    rows = len(global_batch) // world_size
    data = left_right_2_no_padding(global_batch[rank * rows : (rank + 1) * rows].clone())
    if split == "dynamic":
        budget = token_budget(global_batch, world_size, micro_batches)
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=budget)
    else:
        tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=rows // micro_batches)
    tu.assign_non_tensor(
        data,
        temperature=1.0,
        use_remove_padding=True,
        use_fused_kernels=False,
        global_batch_size=len(global_batch),
        calculate_entropy=case.name in ("ppo", "geo_mean", "trinity"),
    )
    return data


def _build_engine(case: Case, precision: str, model_path: Path, attention: str):
    import torch
    from verl.trainer.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    model_config = HFModelConfig(
        path=str(model_path),
        load_tokenizer=False,
        use_remove_padding=True,
        override_config={"attn_implementation": attention},
    )
    # bf16: verl's default actor and critic setting (fp32 master weights and gradient reduction, bf16 compute)
    compute = "bf16" if precision == "bf16" else "fp32"
    engine_config = FSDPEngineConfig(
        strategy="fsdp2",
        model_dtype="fp32",
        mixed_precision={"param_dtype": compute, "reduce_dtype": "fp32", "buffer_dtype": "fp32"},
        use_torch_compile=False,
        forward_only=False,
    )
    optimizer_config = FSDPOptimizerConfig(lr=0.0, weight_decay=0.0, clip_grad=1.0, total_training_steps=10)
    model_config.model_type = "value_model" if case.engine == "value" else "language_model"
    engine_class = FSDPEngineWithValueHead if case.engine == "value" else FSDPEngineWithLMHead
    engine = engine_class(
        model_config=model_config,
        engine_config=engine_config,
        optimizer_config=optimizer_config,
        checkpoint_config=CheckpointConfig(),
    )
    torch.manual_seed(MODEL_SEED)  # the value head is not in the checkpoint: the same head on every tree
    from engine_sim import every_rank_loads_weights

    with every_rank_loads_weights() if case.needs_trinity else contextlib.nullcontext():
        engine.initialize()
    torch.distributed.barrier()
    return engine


def _loss_function(case: Case) -> Any:
    if case.name == "critic":
        from verl.workers.config import CriticConfig
        from verl.workers.utils.losses import value_loss

        config = CriticConfig(
            strategy="fsdp2", ppo_micro_batch_size_per_gpu=1, cliprange_value=0.2, loss_agg_mode=LOSS_AGG_MODE
        )
        return partial(value_loss, config)
    if case.name in ("ppo", "geo_mean"):
        from engine_sim import actor_config
        from verl.workers.config import PolicyLossConfig
        from verl.workers.utils.losses import ppo_loss

        config = actor_config(
            LOSS_AGG_MODE,
            strategy="fsdp2",
            policy_loss=PolicyLossConfig(loss_mode="vanilla" if case.name == "ppo" else "geo_mean"),
            use_kl_loss=True,
            entropy_coeff=0.01,
        )
        return partial(ppo_loss, config)
    if case.name == "distillation":
        from engine_sim import actor_config as engine_actor_config
        from verl.trainer.distillation.losses import distillation_ppo_loss
        from verl.workers.config import DistillationConfig, DistillationLossConfig

        # a fresh worker's configs: verl keeps the global batch info on them between calls
        actor_config = engine_actor_config(LOSS_AGG_MODE, strategy="fsdp2")
        loss_config = DistillationLossConfig(loss_mode="k3", use_policy_gradient=False, use_task_rewards=False)
        distillation = DistillationConfig(distillation_loss=loss_config)
        return partial(distillation_ppo_loss, config=actor_config, distillation_config=distillation)
    from trinity.trainer.verl.losses import TrinityPolicyLoss
    from trinity_configs import algorithm_config

    return TrinityPolicyLoss(algorithm_config("grpo", LOSS_AGG_MODE))


def step_clock(device: str) -> str:
    """What a step's time is: wall-clock time on a GPU (the device is the process's own); on CPU the CPU time of this
    process, so that time the OS gives to other processes of a shared machine is not counted."""
    return "wall" if device == "cuda" else "process CPU"


def _train_step(engine, data, loss_function, on_gpu: bool) -> tuple[float, int, float]:
    """One `train_batch`: (grad_norm, micro-batches the engine made, seconds by `step_clock`)."""
    import torch

    clock = time.perf_counter if on_gpu else time.process_time
    with engine.train_mode():
        if on_gpu:
            torch.cuda.synchronize()
        started = clock()
        output = engine.train_batch(data, loss_function=loss_function)
        grad_norm = float(output["metrics"]["grad_norm"])
        if on_gpu:
            torch.cuda.synchronize()
        seconds = clock() - started
    return grad_norm, len(output["loss"]), seconds


def _run_case(
    case: Case, precision: str, spec: dict, model: Model, model_path: Path, rank: int, world_size: int
) -> list[dict]:
    import torch

    engine = _build_engine(case, precision, model_path, spec["attention"])
    gc.collect()
    gc.freeze()
    global_batch = make_global_batch(model, global_batch_size(model, world_size, tuple(spec["micro_batches"])))
    if case.name == "distillation":
        global_batch = _with_teacher(global_batch, model.vocab)
    splits = [("fixed", 1)] + [(s, k) for s in spec["splits"] for k in spec["micro_batches"] if k > 1]

    def step(split: str, micro_batches: int, engine=engine) -> tuple[float, int, float]:
        data = _step_data(case, global_batch, rank, world_size, split, micro_batches)
        # a fresh loss each step: distillation's first call
        return _train_step(engine, data, _loss_function(case), on_gpu=spec["device"] == "cuda")

    step("fixed", 1)  # warm-up, not recorded (allocations, kernel selection)
    rows = []
    for split, micro_batches in splits:
        runs = [step(split, micro_batches) for _ in range(spec["repeats"])]
        rows.append(
            {
                "case": case.name,
                "precision": precision,
                "split": split,
                "micro_batches": micro_batches,
                "grad_norm": runs[0][0],
                "made": runs[0][1],
                "seconds": [run[2] for run in runs],
            }
        )
    del step, engine  # the closure holds the engine too
    gc.unfreeze()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return rows


# ---------------------------------------------------------------------------------------------------------
# the rank
# ---------------------------------------------------------------------------------------------------------


def module_files(cases: Sequence[str]) -> dict[str, str]:
    """Where the engine and loss modules this process used come from (checked against the trees claimed)."""
    import importlib

    names = ["verl", "verl.workers.engine.fsdp.transformer_impl", "verl.workers.utils.losses"]
    names += ["verl.trainer.ppo.core_algos"]
    if "distillation" in cases:
        names += ["verl.trainer.distillation.losses"]
    if "trinity" in cases:
        names += ["trinity", "trinity.trainer.verl.losses", "trinity.trainer.verl.monkey_patch"]
    return {name: str(Path(importlib.import_module(name).__file__ or "").resolve()) for name in names}


def _environment(device: str, world_size: int, backend: str, unpad: str, attention: str) -> dict[str, Any]:
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


def run_rank(rank: int, spec: dict, workdir: str) -> None:
    """Run every case and precision of ``spec`` on this rank; write ``rank<N>.json`` (measurements on rank 0)."""
    world_size = spec["world_size"]
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    try:
        import torch

        if spec["device"] == "cuda":
            torch.cuda.set_device(rank)
            backend = "cpu:gloo,cuda:nccl"
        else:
            backend = "gloo"
        torch.distributed.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size)
        unpad = _unpad_helpers()
        from engine_sim import load_value_head_with_config_attention

        load_value_head_with_config_attention()
        model = MODELS[spec["model"]]
        rows: list[dict] = []
        for name in spec["cases"]:
            case = CASES[name]
            if case.needs_trinity:
                from trinity.trainer.verl.monkey_patch import patch_verl_engine

                patch_verl_engine()
            for precision in spec["precisions"]:
                rows += _run_case(case, precision, spec, model, Path(spec["model_path"]), rank, world_size)
        result = {
            "measurements": rows if rank == 0 else [],
            "modules": module_files(spec["cases"]),
            "environment": _environment(spec["device"], world_size, backend, unpad, spec["attention"]),
        }
        torch.distributed.destroy_process_group()
    except BaseException:
        result = {"error": traceback.format_exc()}
    (Path(workdir) / f"rank{rank}.json").write_text(json.dumps(result))
    if "error" in result and world_size > 1:
        # a non-zero exit makes torch.multiprocessing end the other ranks, which would wait in a collective forever
        raise SystemExit(1)
