"""Mirror of ``verl.trainer.ppo.core_algos``: ``compute_value_loss`` with the global-batch arguments (patch 0001), and
``compute_policy_loss_geo_mean`` aggregated over the global mini-batch (patch 0003).

Installed by replacing the upstream function's code in place (`patchset_overlay.replace`), so it runs in
``verl.trainer.ppo.core_algos``'s own namespace: every global below must be the very object that module holds.
"""

from __future__ import annotations

from typing import Any

import torch
import verl.utils.torch_functional as verl_F
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import agg_loss
from verl.workers.config import ActorConfig


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    batch_num_tokens: int | None = None,
    global_batch_size: int | None = None,
    loss_scale_factor: int | None = None,
):
    """
    Compute the clipped value-function loss for PPO, normalized by the global mini-batch when it is known.

    Args:
        vpreds (torch.FloatTensor): predicted values, shape (batch_size, response_length).
        returns (torch.FloatTensor): returns, shape (batch_size, response_length).
        values (torch.FloatTensor): old values, shape (batch_size, response_length).
        response_mask (torch.Tensor): tokens that count, shape (batch_size, response_length).
        cliprange_value (float): clip range of the value prediction around the old values.
        loss_agg_mode (str, optional): aggregation mode for `agg_loss`. Defaults to "token-mean".
        dp_size (int, optional): data parallel size, forwarded to `agg_loss`. Defaults to 1.
        batch_num_tokens (int, optional): valid tokens in the global mini-batch; None normalizes by this
            micro-batch's tokens.
        global_batch_size (int, optional): sequences in the global mini-batch; None normalizes by this
            micro-batch's sequences.
        loss_scale_factor (int, optional): scale for "seq-mean-token-sum-norm", forwarded to `agg_loss`.

    Returns:
        vf_loss (torch.FloatTensor): the aggregated value loss, a scalar.
        vf_clipfrac (float): fraction of tokens where the clipped loss was the larger.
    """
    clipped_vpreds = verl_F.clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    unclipped_losses = (vpreds - returns) ** 2
    clipped_losses = (clipped_vpreds - returns) ** 2
    # the engine sums the micro-batch losses: each must be its share of the global mini-batch loss
    vf_loss = 0.5 * agg_loss(
        loss_mat=torch.max(unclipped_losses, clipped_losses),
        loss_mask=response_mask,
        loss_agg_mode=loss_agg_mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
        loss_scale_factor=loss_scale_factor,
    )
    vf_clipfrac = verl_F.masked_mean(torch.gt(clipped_losses, unclipped_losses).float(), response_mask)
    return vf_loss, vf_clipfrac


def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """
    The GMPO (geometric-mean) clipped policy objective, one loss per sequence, as a share of the global mini-batch.

    Each sequence's loss is minus its sequence-level advantage times the geometric mean of its clipped token ratios
    (times the geometric mean of its rollout correction weights, when given). The result is their sum over the
    micro-batch divided by ``global_batch_size`` and multiplied by ``dp_size`` (``config.global_batch_info``), so the
    engine's sum over micro-batches and DDP/FSDP's average over ranks give the mini-batch mean. Without
    ``global_batch_size``: the micro-batch mean at dp_size 1 (the old value), agg_loss's ValueError at dp_size > 1.
    Every row counts, as in the trainer's ``global_batch_size``; a response without valid tokens adds a loss of zero.

    Args:
        old_log_prob (torch.Tensor): log-probs under the old policy, shape (batch_size, response_length).
        log_prob (torch.Tensor): log-probs under the current policy, shape (batch_size, response_length).
        advantages (torch.Tensor): advantages (sequence-level), shape (batch_size, response_length).
        response_mask (torch.Tensor): tokens that count, shape (batch_size, response_length).
        loss_agg_mode (str, optional): not used; GMPO aggregates per sequence.
        config (ActorConfig): clip ratios, and the engine's ``global_batch_info``.
        rollout_is_weights (torch.Tensor, optional): rollout correction weights, shape (batch_size, response_length).
    """
    assert config is not None
    assert not isinstance(config, AlgoConfig)
    clip_ratio = config.clip_ratio
    cliprange_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip_ratio
    cliprange_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip_ratio
    if cliprange_low is None:
        cliprange_low = clip_ratio
    if cliprange_high is None:
        cliprange_high = clip_ratio

    negative_approx_kl = log_prob - old_log_prob
    ppo_kl = verl_F.masked_mean(-negative_approx_kl, response_mask)

    # token-level clipping, on the side the advantage's sign makes pessimistic
    sgn_advantage = torch.sign(advantages)
    negative_approx_kl_clamp = torch.clamp(negative_approx_kl, -cliprange_low, cliprange_high)
    negative_approx_kl_min = torch.min(sgn_advantage * negative_approx_kl, sgn_advantage * negative_approx_kl_clamp)
    negative_approx_kl_min = sgn_advantage * negative_approx_kl_min

    # the geometric mean of the token ratios of each sequence, times its (sequence-level) advantage
    response_mask_sum = response_mask.sum(dim=-1)
    ratio = torch.exp((negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8))
    advantage = (advantages * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
    pg_losses = -advantage * ratio

    if rollout_is_weights is not None:
        # token-level weights to one weight per sequence, by their geometric mean too
        seq_is_weights = torch.exp(
            (torch.log(rollout_is_weights + 1e-10) * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
        )
        pg_losses = pg_losses * seq_is_weights

    # the engine sums the micro-batch losses: each is its share of the mean over the global mini-batch's sequences;
    # the all-ones mask keeps every row, as torch.mean did (the micro-batch mean without the engine's info)
    pg_loss = agg_loss(
        loss_mat=pg_losses.unsqueeze(-1),
        loss_mask=torch.ones_like(pg_losses).unsqueeze(-1),
        loss_agg_mode="seq-mean-token-sum",
        **config.global_batch_info,
    )

    clipped = torch.ne(negative_approx_kl, negative_approx_kl_clamp)
    pg_clipfrac = verl_F.masked_mean((clipped * (advantages > 0)).float(), response_mask)
    pg_clipfrac_lower = verl_F.masked_mean((clipped * (advantages < 0)).float(), response_mask)
    pg_metrics = {
        "actor/pg_clipfrac": pg_clipfrac.detach().item(),
        "actor/ppo_kl": ppo_kl.detach().item(),
        "actor/pg_clipfrac_lower": pg_clipfrac_lower.detach().item(),
    }
    return pg_loss, pg_metrics
