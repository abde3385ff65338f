"""Trinity-RFT's ``trainer.fix_actor_microbatch_loss_scale`` on veRL's engine path: the switch, honoured.

Trinity-RFT 0.6.0 has the switch (PR #336: opt-in, default False, token-mean only) for its legacy ``dp_actor``; on
veRL's engine it reaches no code. The series passes it to ``TrinityPolicyLoss`` and extends it to every
``loss_agg_mode``; a carried patch turns it on by default for this patchset's users.

Invariants, through the real path that installs the actor loss (``VERLTrainer.prepare`` ->
``TrinityActorRolloutRefWorker.set_trinity_config`` -> ``build_trinity_loss``):

- patched, switch on: the globally normalized gradient (K = 4 micro-batches equal K = 1) for every
  ``loss_agg_mode``; for ``token-mean`` exactly what the switch's legacy rule gives (each micro-batch scaled by its
  response tokens / the mini-batch's tokens, times the data-parallel size); the veRL trainer's default is on, a
  config that skipped the validator is refused;
- vanilla: the switch does nothing on the engine path: on, the gradient is about K times too large, and the
  default is off;
- both trees, switch off: upstream's loss, as it is: each micro-batch's loss is its unscaled combined loss, and the
  patched tree's gradients equal the vanilla run's record exactly (``PATCHSET_BASELINE_DIR``).

And the one case the weight does not guard, the same as veRL's own ``agg_loss``: a global mini-batch with no
response token at all gives a non-finite token-mean loss (0/0), which veRL's FSDP engine answers by skipping the
optimizer step; the legacy path's ``+1e-6`` gives a zero-gradient step instead.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from harness.sim import engine_gradient, grad_ratio, same_as_vanilla
from harness.trinity_configs import installed_actor_loss

from engine_harness import LOSS_AGG_MODES
from engine_harness.sim import Split, make_rollout_batch, pack_model_output, use_cpu_unpadding
from engine_harness.trinity_configs import algorithm_config, default_loss_scale_switch

BATCH_SIZE = 32
SPLIT = Split(4)
BUG_RATIO_TOLERANCE = 0.15


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(trinity_tree: Path) -> None:
    use_cpu_unpadding()


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
    """The switch's token-mean rule from Trinity's legacy dp_actor, applied to each micro-batch's own mean (a loss
    built with the switch off): loss * (response tokens of the micro-batch) / (response tokens of the mini-batch) *
    dp_size."""
    global_tokens = batch["response_mask"].sum()

    def scaled(model_output, data):
        loss, metrics = loss_fn(model_output, data)
        local_tokens = batch["response_mask"][data["row_id"]].sum()
        return loss * local_tokens / global_tokens * dp_size, metrics

    return scaled


def test_patchset_default_turns_the_switch_on_for_verl_only(expect):
    """A config that does not set the switch, once Trinity's validator has seen it: on for the veRL trainer in the
    patched tree (0010), off in vanilla; off for Tinker on both trees (upstream's default there)."""
    assert default_loss_scale_switch("verl") is (expect == "fixed")
    assert default_loss_scale_switch("tinker") is False


def test_unvalidated_config_is_refused_not_read_as_off(expect):
    """Patched, the switch is unset until the validator resolves it, and veRL's trainer refuses a config that skipped
    the validator instead of reading None as off; vanilla's default is False, and the loss is installed with it."""
    algo = algorithm_config("grpo", "token-mean")
    if expect == "fixed":
        with pytest.raises(ValueError, match="fix_actor_microbatch_loss_scale` is unset"):
            installed_actor_loss(algo, validated=False)
    else:
        assert installed_actor_loss(algo, validated=False) is not None


@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
def test_switch_on_gives_the_globally_normalized_engine_gradient(expect, loss_agg_mode):
    batch, outputs = _inputs()
    switch_on = installed_actor_loss(algorithm_config("grpo", loss_agg_mode), True)

    reference, _ = engine_gradient(switch_on, batch, outputs, Split(1))
    gradient, _ = engine_gradient(switch_on, batch, outputs, SPLIT)

    if expect == "fixed":
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)
    elif loss_agg_mode != "seq-mean-token-sum-norm":  # a plain sum in vanilla: right on one rank
        ratio = grad_ratio(gradient, reference)
        assert ratio == pytest.approx(SPLIT.num_micro_batches, rel=BUG_RATIO_TOLERANCE), f"ratio {ratio:.3f}"


@pytest.mark.vanilla_baseline
@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
def test_switch_off_is_upstreams_engine_loss(expect, baseline_dir, loss_agg_mode):
    """The same on both trees: with the switch off each micro-batch's loss is its unscaled combined loss, so the
    gradient grows with K as upstream's does; the vanilla run records its gradient and the patched run must give
    exactly the same one."""
    batch, outputs = _inputs()
    switch_off = installed_actor_loss(algorithm_config("grpo", loss_agg_mode), False)
    losses = []

    def recording(model_output, data):
        loss, metrics = switch_off(model_output, data)
        losses.append((loss.item(), metrics["final_loss"]))
        return loss, metrics

    gradient, _ = engine_gradient(recording, batch, outputs, SPLIT)

    assert len(losses) == SPLIT.num_micro_batches
    assert all(loss == final_loss for loss, final_loss in losses), losses
    same_as_vanilla(baseline_dir, expect, f"actor-switch-off-{loss_agg_mode}", gradient)


def test_token_mean_gradient_is_what_the_switch_promises(expect):
    batch, outputs = _inputs(seed=1)
    config = algorithm_config("grpo", "token-mean")
    loss_fn = installed_actor_loss(config, True)

    engine, _ = engine_gradient(loss_fn, batch, outputs, SPLIT)
    unscaled = installed_actor_loss(config, False)
    flag_rule, _ = engine_gradient(_legacy_flag_rule(unscaled, batch), batch, outputs, SPLIT, global_batch_info=False)

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
    loss_fn = installed_actor_loss(algorithm_config("grpo", "token-mean"), True)
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
