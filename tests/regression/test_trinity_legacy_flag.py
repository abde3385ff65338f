"""Trinity-RFT's ``trainer.fix_actor_microbatch_loss_scale`` on veRL's engine path: superseded, not honoured.

Trinity-RFT 0.6.0 has the flag (PR #336: opt-in, token-mean only) for its legacy ``dp_actor``; on veRL's engine it
reaches no code. The series supersedes it there: ``TrinityPolicyLoss`` follows veRL's own ``ppo_loss`` contract
for every ``loss_agg_mode``, whatever the flag says.

Invariants, through the real path that installs the actor loss (``VERLTrainer.prepare`` ->
``TrinityActorRolloutRefWorker.set_trinity_config`` -> ``build_trinity_loss``) with the flag on and off:

- patched: on and off give the same gradient, and it is the globally normalized one (K = 4 micro-batches equal
  K = 1), for every ``loss_agg_mode``; for ``token-mean`` it is exactly what the flag's legacy rule gives
  (each micro-batch scaled by its response tokens / the mini-batch's tokens, times the data-parallel size);
- vanilla: on and off give the same gradient too, about K times too large: the flag does nothing there.

And the one case the weight does not guard, the same as veRL's own ``agg_loss``: a global mini-batch with no
response token at all gives a non-finite token-mean loss (0/0), which veRL's FSDP engine answers by skipping the
optimizer step; the legacy path's ``+1e-6`` gives a zero-gradient step instead.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine_harness import LOSS_AGG_MODES
from engine_harness.sim import (
    Split,
    engine_gradient,
    grad_ratio,
    make_rollout_batch,
    pack_model_output,
    use_cpu_unpadding,
)
from engine_harness.trinity_configs import algorithm_config

BATCH_SIZE = 32
SPLIT = Split(4)
BUG_RATIO_TOLERANCE = 0.15


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(trinity_tree: Path) -> None:
    use_cpu_unpadding()


def installed_actor_loss(algo_config, fix_actor_microbatch_loss_scale: bool):
    """The loss Trinity installs in the actor worker, by ``VERLTrainer.prepare`` and the worker's real
    ``set_trinity_config``, for a trainer config whose ``trainer.fix_actor_microbatch_loss_scale`` is given.
    Only what those two methods read is stubbed (the worker's engine, the Ray worker group, the checkpoint)."""
    from trinity.trainer.verl.trainer import VERLTrainer
    from trinity.trainer.verl.workers import TrinityActorRolloutRefWorker

    installed = {}
    worker = SimpleNamespace(actor=SimpleNamespace(set_loss_fn=lambda fn: installed.setdefault("loss", fn)))

    def set_trinity_config(**kwargs):
        return TrinityActorRolloutRefWorker.set_trinity_config(worker, **kwargs)

    global_config = SimpleNamespace(
        trainer=SimpleNamespace(fix_actor_microbatch_loss_scale=fix_actor_microbatch_loss_scale),
        explorer=SimpleNamespace(rollout_model=SimpleNamespace(engine_type="vllm")),
        synchronizer=SimpleNamespace(ray_namespace="test"),
    )
    trainer = SimpleNamespace(
        actor_rollout_wg=SimpleNamespace(set_trinity_config=set_trinity_config),
        algorithm_config=algo_config,
        global_config=global_config,
        config=SimpleNamespace(trainer=global_config.trainer),
        _load_checkpoint=lambda: None,
    )
    asyncio.run(VERLTrainer.prepare(trainer))
    return installed["loss"]


def _inputs(seed: int = 0):
    batch = make_rollout_batch(
        BATCH_SIZE, seed=seed, extra_fields=("old_log_probs", "ref_log_prob", "advantages"), holes_in_mask=True
    )
    noise = torch.randn(batch["old_log_probs"].shape, generator=torch.Generator().manual_seed(seed + 5))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    batch["ref_log_prob"] = -batch["ref_log_prob"].abs()
    log_probs = batch["old_log_probs"] + 0.1 * noise
    entropy = torch.rand(log_probs.shape, generator=torch.Generator().manual_seed(seed + 6))
    return batch, {"log_probs": log_probs, "entropy": entropy}


def _legacy_flag_rule(loss_fn, batch, dp_size: int = 1):
    """The flag's token-mean rule from Trinity's legacy dp_actor, applied to each micro-batch's own mean:
    loss * (response tokens of the micro-batch) / (response tokens of the mini-batch) * dp_size."""
    global_tokens = batch["response_mask"].sum()

    def scaled(model_output, data):
        loss, metrics = loss_fn(model_output, data)  # the engine sim asks for no global normalization here
        local_tokens = batch["response_mask"][data["row_id"]].sum()
        return loss * local_tokens / global_tokens * dp_size, metrics

    return scaled


@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
def test_flag_on_and_off_give_the_same_engine_gradient(expect, loss_agg_mode):
    batch, outputs = _inputs()
    config = algorithm_config("grpo", loss_agg_mode)
    flag_off = installed_actor_loss(config, False)
    flag_on = installed_actor_loss(config, True)

    reference, _ = engine_gradient(flag_off, batch, outputs, Split(1))
    gradient_off, _ = engine_gradient(flag_off, batch, outputs, SPLIT)
    gradient_on, _ = engine_gradient(flag_on, batch, outputs, SPLIT)

    torch.testing.assert_close(gradient_on, gradient_off, rtol=0, atol=0)
    if expect == "fixed":
        torch.testing.assert_close(gradient_off, reference, rtol=1e-5, atol=1e-7)
    elif loss_agg_mode != "seq-mean-token-sum-norm":  # a plain sum in vanilla: right on one rank
        ratio = grad_ratio(gradient_on, reference)
        assert ratio == pytest.approx(SPLIT.num_micro_batches, rel=BUG_RATIO_TOLERANCE), f"ratio {ratio:.3f}"


def test_token_mean_gradient_is_what_the_flag_promises(expect):
    batch, outputs = _inputs(seed=1)
    loss_fn = installed_actor_loss(algorithm_config("grpo", "token-mean"), True)

    engine, _ = engine_gradient(loss_fn, batch, outputs, SPLIT)
    flag_rule, _ = engine_gradient(_legacy_flag_rule(loss_fn, batch), batch, outputs, SPLIT, global_batch_info=False)

    if expect == "fixed":
        torch.testing.assert_close(engine, flag_rule, rtol=1e-5, atol=1e-7)
    else:
        assert grad_ratio(engine, flag_rule) == pytest.approx(SPLIT.num_micro_batches, rel=BUG_RATIO_TOLERANCE)


def test_token_mean_without_response_tokens_is_not_finite_like_verls_agg_loss(expect):
    from verl.trainer.ppo.core_algos import agg_loss
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    batch, outputs = _inputs(seed=2)
    batch["response_mask"] = torch.zeros_like(batch["response_mask"])
    loss_fn = installed_actor_loss(algorithm_config("grpo", "token-mean"), False)
    data = left_right_2_no_padding(batch.clone())
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=0, global_batch_size=len(batch))
    model_output = {name: pack_model_output(batch, tensor) for name, tensor in outputs.items()}

    loss, metrics = loss_fn(model_output, data)
    verl_loss = agg_loss(
        torch.ones(2, 3), torch.zeros(2, 3), "token-mean", dp_size=1, batch_num_tokens=0, global_batch_size=2
    )

    assert not math.isfinite(verl_loss.item())  # veRL's own token-mean: 0 / 0
    assert math.isfinite(metrics["final_loss"])
    if expect == "fixed":
        assert not math.isfinite(loss.item())
    else:
        assert math.isfinite(loss.item())
