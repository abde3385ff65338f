"""Feed a loss function the way verl 0.8's engine does, without a model.

`FSDPEngine.forward_backward_batch` takes one mini-batch per data-parallel rank, converts it to the
no-padding layout (`left_right_2_no_padding`), counts the valid tokens and all-reduces them into
``batch_num_tokens``, records ``dp_size``, splits the batch with `prepare_micro_batches` (fixed size, or
by token budget with ``use_dynamic_bsz``), calls the loss on every micro-batch and backpropagates each
micro-batch loss; data parallelism then averages the gradients over ranks. This module drives the real
verl helpers through the same steps and stands in for the model with one leaf tensor per model output, so
the gradient that reaches it is exactly the gradient the loss sends into the network.

On CPU, verl's unpad helpers are its pure-torch ones (`engine_harness.sim.use_cpu_unpadding`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from engine_harness.sim import PROMPT_LEN, RESPONSE_LEN, Split, pack_model_output, use_cpu_unpadding

LossFn = Callable[[dict, TensorDict], tuple[torch.Tensor, dict]]


def verl_series_on_cpu(verl_series: str, what: str, series: Sequence[str] = ("verl",)) -> None:
    """For a test of a fix in the given series only (by default the verl series: 0.8.0, 0.9.1): skip on another
    series' tree, saying that ``what`` is not there; else `use_cpu_unpadding`."""
    import pytest

    if verl_series not in series:
        pytest.skip(f"{what} is in the {' and '.join(series)} series only, not {verl_series}")
    use_cpu_unpadding()


# verl's cut of a rank's rows into micro-batches, by what decides it (`_cut_key`): the suite cuts the same rows the same
# way for every loss and mode it compares (158 distinct cuts of 1,691 in the fix run's main process, 8.6 s of CPU there)
_CUTS: dict[bytes, list[TensorDict]] = {}
_PLAIN = (int, float, str, bool, type(None))


def _cut_key(rank_batch: TensorDict, split: Split, batch_info: dict, force_group_size: int) -> bytes | None:
    """What verl's cut is a function of: every field of the rows, the split and batch info asked for, and the verl
    functions that cut (a test that swaps one gets its own cuts); None where a field or an info is not plain data."""
    import verl.utils.attention_utils as attention_utils
    import verl.workers.engine.utils as engine_utils
    from verl.workers.utils.padding import left_right_2_no_padding

    if not all(isinstance(value, _PLAIN) for value in batch_info.values()):
        return None
    digest = hashlib.blake2b()
    for name in sorted(rank_batch.keys()):
        field = rank_batch[name]
        if not isinstance(field, torch.Tensor) or field.is_nested:
            return None
        digest.update(f"{name} {field.dtype} {tuple(field.shape)}".encode())
        digest.update(field.contiguous().numpy().tobytes())
    functions = (engine_utils.prepare_micro_batches, getattr(engine_utils, "rearrange_micro_batches", None))
    functions += (left_right_2_no_padding, getattr(attention_utils, "_get_attention_functions", None))
    digest.update(repr((split, sorted(batch_info.items()), force_group_size, [id(f) for f in functions])).encode())
    return digest.digest()


def _engine_micro_batches(
    rank_batch: TensorDict, split: Split, batch_info: dict, force_group_size: int = 1
) -> list[TensorDict]:
    """verl's micro-batches of ``rank_batch`` (`_cut`), each a copy: a cut made before is not made again."""
    key = _cut_key(rank_batch, split, batch_info, force_group_size)
    if key is None:
        return _cut(rank_batch, split, batch_info, force_group_size)
    if key not in _CUTS:
        _CUTS[key] = _cut(rank_batch, split, batch_info, force_group_size)
    return [micro_batch.clone() for micro_batch in _CUTS[key]]


def _cut(rank_batch: TensorDict, split: Split, batch_info: dict, force_group_size: int) -> list[TensorDict]:
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches
    from verl.workers.utils.padding import left_right_2_no_padding

    data = left_right_2_no_padding(rank_batch.clone())
    if split.dynamic:
        total_tokens = int(rank_batch["attention_mask"].sum())
        budget = max(-(-total_tokens // split.num_micro_batches), PROMPT_LEN + RESPONSE_LEN)
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=budget)
    else:
        assert len(rank_batch) % split.num_micro_batches == 0, "fixed split needs an even division"
        # verl counts a fixed micro-batch size in groups of force_group_size rows
        micro_batch_size = len(rank_batch) // (split.num_micro_batches * force_group_size)
        tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch_size)
    if force_group_size > 1:
        tu.assign_non_tensor(data, force_group_size=force_group_size)
    tu.assign_non_tensor(data, **batch_info)
    micro_batches, _ = prepare_micro_batches(data=data, dp_group=None, same_micro_num_in_dp=True)
    assert len(micro_batches) == split.num_micro_batches, (
        f"asked verl for {split}, it made {len(micro_batches)} micro-batches"
    )
    return list(micro_batches)


def engine_gradient(
    loss_fn: LossFn | Sequence[LossFn],
    batch: TensorDict,
    outputs: dict[str, torch.Tensor],
    split: Split,
    dp_size: int = 1,
    global_batch_info: bool = True,
    force_group_size: int = 1,
) -> tuple[torch.Tensor, list[dict]]:
    """Gradient the network would get, flattened over ``outputs``, and the per-micro-batch metrics.

    ``outputs`` maps model output names ("values", "log_probs", "entropy") to padded (bsz, response_len)
    tensors. The batch is dealt to ``dp_size`` simulated ranks in contiguous blocks; each rank runs the
    engine's micro-batch loop; the rank gradients are averaged as data parallelism does. With
    ``global_batch_info`` off the loss gets batch info that asks for no global normalization (``dp_size`` 1,
    ``batch_num_tokens`` and ``global_batch_size`` None): each loss then normalizes within its micro-batch, as it
    does outside the engine. The keys stay present because verl's own losses (``ppo_loss``, and ``value_loss`` with
    the critic fix, as in verl 0.9.x) read them strictly.
    ``force_group_size`` is what the trainer asks verl for to keep consecutive rows in one micro-batch.
    ``loss_fn`` may be one loss per rank, for a loss that keeps state between calls in its rank's worker.
    """
    rank_loss_fns = list(loss_fn) if isinstance(loss_fn, Sequence) else [loss_fn] * dp_size
    assert len(rank_loss_fns) == dp_size, f"{len(rank_loss_fns)} loss functions for {dp_size} ranks"
    leaves = {name: tensor.detach().clone().requires_grad_(True) for name, tensor in outputs.items()}
    global_tokens = int(batch["response_mask"].sum())  # the engine counts loss_mask, i.e. response_mask
    metrics: list[dict] = []
    rank_grads = []
    for rank_rows, rank_loss_fn in zip(torch.arange(len(batch)).chunk(dp_size), rank_loss_fns, strict=True):
        rank_batch = batch[rank_rows]
        batch_info = (
            {"dp_size": dp_size, "batch_num_tokens": global_tokens, "global_batch_size": len(batch)}
            if global_batch_info
            else {"dp_size": 1, "batch_num_tokens": None, "global_batch_size": None}
        )
        total = None
        for micro_batch in _engine_micro_batches(rank_batch, split, batch_info, force_group_size):
            rows = micro_batch["row_id"]
            model_output = {name: pack_model_output(micro_batch, leaf[rows]) for name, leaf in leaves.items()}
            loss, micro_metrics = rank_loss_fn(model_output, micro_batch)
            metrics.append(micro_metrics)
            total = loss if total is None else total + loss
        grads = torch.autograd.grad(total, list(leaves.values()), allow_unused=True)
        filled = [torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves.values(), strict=True)]
        rank_grads.append(torch.cat(filled, dim=1))
    return torch.stack(rank_grads).mean(dim=0).flatten(), metrics


def grad_ratio(gradient: torch.Tensor, reference: torch.Tensor) -> float:
    """Norm of ``gradient`` relative to the norm of ``reference``."""
    return float(gradient.norm() / reference.norm())


def record_ratio(baseline_dir: Path | None, expect: str, component: str, case: str, ratio: float) -> None:
    """Append one measured ratio to ``ratios-<expect>.jsonl`` for the test command's table (no-op without a dir)."""
    _record(baseline_dir, expect, {"component": component, "case": case, "ratio": ratio})


def record_relative_error(baseline_dir: Path | None, expect: str, component: str, case: str, error: float) -> None:
    """Append one gradient's relative error to one micro-batch's (0 where exact) beside the ratios: the test command
    reports these apart from them (no-op without a dir)."""
    _record(baseline_dir, expect, {"component": component, "case": case, "relative_error": error})


def _record(baseline_dir: Path | None, expect: str, row: dict) -> None:
    if baseline_dir is None:
        return
    baseline_dir.mkdir(parents=True, exist_ok=True)
    with (baseline_dir / f"ratios-{expect}.jsonl").open("a") as stream:
        stream.write(json.dumps(row) + "\n")


def same_as_vanilla(baseline_dir: Path | None, expect: str, name: str, gradient: torch.Tensor) -> None:
    """The vanilla run records ``gradient`` as ``name``; the patched run asserts it gives exactly the same one (a
    behaviour the series must leave as upstream has it). A no-op without a dir, or where vanilla recorded nothing."""
    if baseline_dir is None:
        return
    baseline_file = baseline_dir / f"{name.replace(' ', '_')}.json"
    if expect == "bug":
        baseline_dir.mkdir(parents=True, exist_ok=True)
        baseline_file.write_text(json.dumps(gradient.tolist()))
    elif baseline_file.exists():
        vanilla = torch.tensor(json.loads(baseline_file.read_text()), dtype=gradient.dtype)
        torch.testing.assert_close(gradient, vanilla, rtol=0, atol=0)


ROLLOUT_FIELDS = ("input_ids", "attention_mask", "position_ids", "prompts", "responses", "response_mask")


def sent_by_update_actor(
    trainer_cls: type,
    policy_loss_fn: str,
    batch: TensorDict,
    actor_config: Any,
    entropy_loss_fn: str = "none",
    fields: tuple[str, ...] = ROLLOUT_FIELDS,
    trainer_gpus: int = 1,
) -> TensorDict:
    """What Trinity's real ``VERLTrainer._update_actor`` hands the actor's engine for ``batch``. Only the fields that
    method reads are stubbed: the actor config, the algorithm, ``trainer_gpus`` and a worker group that records what
    it is sent."""
    from types import SimpleNamespace

    from verl import DataProto
    from verl.utils import tensordict_utils as tu

    sent = {}

    def update_actor(batch_td: TensorDict) -> TensorDict:
        sent["batch"] = batch_td
        output = TensorDict({}, batch_size=[])
        tu.assign_non_tensor(output, metrics={})
        return output

    from trinity.common.config import TrainerConfig

    # the tree's default trainer config: the carried series counts DPO's mini-batch in experiences by default
    trainer_defaults = TrainerConfig()
    trainer = SimpleNamespace(
        algorithm_config=SimpleNamespace(policy_loss_fn=policy_loss_fn, entropy_loss_fn=entropy_loss_fn),
        config=SimpleNamespace(actor=actor_config),
        global_config=SimpleNamespace(
            model=SimpleNamespace(temperature=1.0),
            cluster=SimpleNamespace(trainer_gpu_num=trainer_gpus),
            trainer=trainer_defaults,
        ),
        actor_rollout_wg=SimpleNamespace(update_actor=update_actor),
    )
    trainer_cls._update_actor(trainer, DataProto.from_dict({key: batch[key] for key in fields}), {})
    return sent["batch"]


def group_size_sent_by_trainer(
    trainer_cls: type, policy_loss_fn: str, batch: TensorDict, entropy_loss_fn: str
) -> int | None:
    """The ``force_group_size`` that Trinity's real ``VERLTrainer._update_actor`` hands the actor's engine for
    ``batch`` (None: not set)."""
    from types import SimpleNamespace

    from verl.utils import tensordict_utils as tu

    actor = SimpleNamespace(ppo_mini_batch_size=len(batch), ppo_epochs=1, data_loader_seed=42, shuffle=False)
    actor.use_dynamic_bsz, actor.ppo_micro_batch_size_per_gpu = True, None
    sent = sent_by_update_actor(trainer_cls, policy_loss_fn, batch, actor, entropy_loss_fn)
    return tu.get_non_tensor_data(sent, "force_group_size", default=None)
