"""verl's GMPO policy loss (``geo_mean``, verl 0003) on what test_verl_actor_losses.py leaves out: rollout correction
weights and a response without valid tokens through the real ``ppo_loss``, and calls outside the engine.

- Through verl's no-padding conversion and micro-batch splitter (`harness.sim`), with ``rollout_is_weights`` in
  the data and one response whose tokens are all masked out: on the patched trees the gradient equals one
  micro-batch's (rtol 1e-5), fixed and token-budget splits, dp 2; on the vanilla trees it is the number of
  micro-batches per rank times too large (within 5 % for the token-budget split, whose micro-batches differ in size).
- Outside the engine (an empty ``global_batch_info``, dp_size 1, as verl 0.7's legacy ``dp_actor`` calls policy
  losses), on every tree, vanilla or patched: the loss is the mean over every row of the micro-batch, an empty
  response counting as a zero loss. So micro-batch losses scaled by their share of the mini-batch's rows (what that
  ``dp_actor`` does) add up to the whole mini-batch's loss, and a micro-batch of empty responses gives 0, not NaN.
  The patch keeps this; a row mask of ``response_mask.sum(-1) > 0`` (a larger whole-batch loss, and NaN for the
  empty micro-batch) or a ValueError without ``global_batch_size`` (upstream PR #7916) would not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from harness.sim import engine_gradient, grad_ratio

from engine_harness.sim import Split, actor_config, make_rollout_batch, use_cpu_unpadding

BATCH_SIZE = 24
EMPTY_ROW = 5  # a response whose tokens are all masked out
SPLITS = [(1, Split(4)), (1, Split(3, dynamic=True)), (2, Split(2))]


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(verl_tree: Path) -> None:
    use_cpu_unpadding()


def _rollout_batch():
    batch = make_rollout_batch(BATCH_SIZE, seed=4, extra_fields=("old_log_probs", "advantages", "rollout_is_weights"))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    batch["rollout_is_weights"] = 0.5 + batch["rollout_is_weights"].abs().clamp(max=1.0)
    batch["advantages"] = batch["advantages"][:, :1].expand_as(batch["advantages"]).contiguous()  # one per sequence
    batch["response_mask"][EMPTY_ROW] = 0
    noise = torch.randn(batch["old_log_probs"].shape, generator=torch.Generator().manual_seed(9))
    return batch, {"log_probs": batch["old_log_probs"] + 0.2 * noise}


def _geo_mean_config():
    from verl.workers.config import PolicyLossConfig

    return actor_config("token-mean", policy_loss=PolicyLossConfig(loss_mode="geo_mean"))


def _ppo_gradient(dp_size: int, split: Split) -> torch.Tensor:
    from verl.workers.utils.losses import ppo_loss

    batch, outputs = _rollout_batch()
    configs = [_geo_mean_config() for _ in range(dp_size)]
    loss_fns = [lambda model_output, data, config=config: ppo_loss(config, model_output, data) for config in configs]
    gradient, _ = engine_gradient(loss_fns, batch, outputs, split, dp_size=dp_size)
    return gradient


@pytest.mark.parametrize(("dp_size", "split"), SPLITS, ids=str)
def test_geo_mean_with_rollout_weights_and_an_empty_response_against_one_micro_batch(expect, dp_size, split):
    reference = _ppo_gradient(1, Split(1))
    gradient = _ppo_gradient(dp_size, split)

    if expect == "fixed":
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-8)
    else:
        ratio = grad_ratio(gradient, reference)
        tolerance = 0.05 if split.dynamic else 1e-4
        assert ratio == pytest.approx(split.num_micro_batches, rel=tolerance), f"ratio {ratio:.4f}"


def _outside_engine_loss(batch, log_prob: torch.Tensor, rows: slice) -> torch.Tensor:
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    config = _geo_mean_config()
    assert not config.global_batch_info, "a fresh actor config carries no global batch info"
    loss, _ = get_policy_loss_fn("geo_mean")(
        old_log_prob=batch["old_log_probs"][rows],
        log_prob=log_prob[rows],
        advantages=batch["advantages"][rows],
        response_mask=batch["response_mask"][rows].bool(),
        loss_agg_mode="token-mean",
        config=config,
        rollout_is_weights=batch["rollout_is_weights"][rows],
    )
    return loss


def test_geo_mean_outside_the_engine_is_the_mean_over_every_row(verl_tree: Path):
    batch, outputs = _rollout_batch()
    log_prob = outputs["log_probs"].clone().requires_grad_(True)

    whole = _outside_engine_loss(batch, log_prob, slice(0, BATCH_SIZE))
    # the legacy dp_actor's scaling: each micro-batch's loss times its share of the mini-batch's rows
    shares = [slice(0, 4), slice(4, 13), slice(13, BATCH_SIZE)]
    scaled = sum(_outside_engine_loss(batch, log_prob, rows) * (rows.stop - rows.start) / BATCH_SIZE for rows in shares)
    empty = _outside_engine_loss(batch, log_prob, slice(EMPTY_ROW, EMPTY_ROW + 1))
    (empty_grad,) = torch.autograd.grad(empty, log_prob)

    torch.testing.assert_close(scaled, whole)
    assert empty.item() == 0.0
    assert torch.all(empty_grad == 0)
