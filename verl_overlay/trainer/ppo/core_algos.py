"""Mirror of ``verl.trainer.ppo.core_algos``: ``compute_value_loss`` with the global-batch arguments (patch 0001),
``compute_policy_loss_geo_mean`` aggregated over the global mini-batch (patch 0003), KL-Cov's and Clip-Cov's losses
with the tokens chosen over the optimizer mini-batch and the functions that choose them (patch 0004), and bypass
mode's loss with the IS weights' mean over the mini-batch (patch 0005).

Installed by replacing the upstream function's code in place (`patchset_overlay.replace`), so it runs in
``verl.trainer.ppo.core_algos``'s own namespace: every global below must be the very object that module holds. The
functions patch 0004 adds (``compute_kl_cov_mask``, ``compute_clip_cov_mask`` and their helpers) are added to that
module, bound to its namespace too.
"""

from __future__ import annotations

from typing import Any

import torch
import verl.utils.torch_functional as verl_F
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo.core_algos import (
    agg_loss,
    compute_policy_loss_reinforce,
    compute_policy_loss_vanilla,
)
from verl.workers.config import ActorConfig

# the functions patch 0004 adds to the module, in its order
ADDED_FUNCTIONS = ("_mini_batch_covariance", "_global_top_k", "compute_kl_cov_mask", "_mix31", "compute_clip_cov_mask")


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


def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Clip-Cov (patch 0004): the clipped tokens are the mini-batch's choice the engine worker hands each micro-batch
    in ``config.policy_loss_inputs["clip_cov_mask"]``; without it, drawn within this call as upstream does."""
    assert config is not None
    assert not isinstance(config, AlgoConfig), "passing AlgoConfig not supported yet"
    assert config.policy_loss is not None

    clip_cov_ratio = config.policy_loss.clip_cov_ratio if config.policy_loss.clip_cov_ratio is not None else 0.0002
    cliprange = config.clip_ratio
    cliprange_low = config.clip_ratio_low if config.clip_ratio_low is not None else cliprange
    cliprange_high = config.clip_ratio_high if config.clip_ratio_high is not None else cliprange
    clip_cov_ub = config.policy_loss.clip_cov_ub if config.policy_loss.clip_cov_ub is not None else 5.0
    clip_cov_lb = config.policy_loss.clip_cov_lb if config.policy_loss.clip_cov_lb is not None else 1.0

    assert clip_cov_ratio > 0, "clip_ratio should be larger than 0."

    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = verl_F.masked_mean(-negative_approx_kl, response_mask)

    pg_losses1 = -advantages * ratio

    if cliprange_low is None:
        cliprange_low = cliprange
    if cliprange_high is None:
        cliprange_high = cliprange

    corr = torch.ones_like(advantages)
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0)

    # The engine workers choose the clipped tokens over the whole optimizer mini-batch, across data-parallel ranks
    # (compute_clip_cov_mask), and ppo_loss hands each micro-batch its rows of that choice. Without it (direct
    # callers), the tokens are drawn within this call.
    clip_cov_mask = config.policy_loss_inputs.get("clip_cov_mask")
    if clip_cov_mask is not None:
        corr[clip_cov_mask] = 0
    else:
        cov_all = (advantages - verl_F.masked_mean(advantages, response_mask)) * (
            log_prob - verl_F.masked_mean(log_prob.detach(), response_mask)
        )
        cov_all[response_mask == 0] = -torch.inf
        cov_all[clip_by_origin] = -torch.inf

        clip_num = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
        top_k_idx = (cov_all < clip_cov_ub) & (cov_all > clip_cov_lb) & (response_mask > 0)
        top_k_idx = torch.nonzero(top_k_idx)

        if len(top_k_idx) > 0:
            perm = torch.randperm(len(top_k_idx))
            top_k_idx = top_k_idx[perm[: min(clip_num, len(top_k_idx))]]
        else:
            top_k_idx = torch.empty((0, 2), device=cov_all.device, dtype=torch.long)

        corr[top_k_idx[:, 0], top_k_idx[:, 1]] = 0

    pg_clipfrac = verl_F.masked_mean((corr == 0).float(), response_mask)

    pg_losses = torch.maximum(pg_losses1, pg_losses2) * corr

    # Apply rollout correction weights if provided
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights

    pg_loss = agg_loss(
        loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )
    pg_metrics = {
        "actor/pg_clipfrac": pg_clipfrac.detach().item(),
        "actor/ppo_kl": ppo_kl.detach().item(),
    }
    return pg_loss, pg_metrics


def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """KL-Cov (patch 0004): the penalized tokens are the mini-batch's choice the engine worker hands each micro-batch
    in ``config.policy_loss_inputs["kl_cov_mask"]``; without it, chosen within this call as upstream does."""
    assert config is not None
    assert not isinstance(config, AlgoConfig), "passing AlgoConfig not supported yet"
    assert config.policy_loss is not None

    kl_cov_ratio = config.policy_loss.kl_cov_ratio if config.policy_loss.kl_cov_ratio is not None else 0.0002
    ppo_kl_coef = config.policy_loss.ppo_kl_coef if config.policy_loss.ppo_kl_coef is not None else 1.0

    assert kl_cov_ratio > 0, "kl_cov_ratio should be larger than 0."

    negative_approx_kl = log_prob - old_log_prob
    abs_kl = negative_approx_kl.abs()
    ratio = torch.exp(negative_approx_kl)
    ppo_kl_abs = verl_F.masked_mean(negative_approx_kl.abs(), response_mask)
    pg_losses1 = -advantages * ratio
    pg_losses_kl = -advantages * ratio + ppo_kl_coef * abs_kl
    pg_losses = pg_losses1

    # The engine workers choose the penalized tokens over the whole optimizer mini-batch, across data-parallel
    # ranks (compute_kl_cov_mask), and ppo_loss hands each micro-batch its rows of that choice. Without it
    # (direct callers), the tokens are chosen within this call.
    kl_cov_mask = config.policy_loss_inputs.get("kl_cov_mask")
    if kl_cov_mask is not None:
        pg_losses = torch.where(kl_cov_mask, pg_losses_kl, pg_losses1)
    else:
        all_valid = response_mask > 0
        all_valid_idx = torch.nonzero(all_valid.reshape(-1), as_tuple=True)[0]
        all_valid_adv = advantages[all_valid].detach().reshape(-1).cpu()
        all_valid_logp = log_prob[all_valid].detach().reshape(-1).cpu()

        k = min(kl_cov_ratio, len(all_valid_adv))

        if k != 0:
            cov_lst_all = (all_valid_adv - all_valid_adv.mean()) * (all_valid_logp - all_valid_logp.mean())
            k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))
            large_cov_idxs = torch.topk(cov_lst_all, k_percent_nums, largest=True).indices

            if len(large_cov_idxs) != 0:
                large_cov_idxs = all_valid_idx[large_cov_idxs]
                pg_losses[large_cov_idxs // advantages.shape[1], large_cov_idxs % advantages.shape[1]] = pg_losses_kl[
                    large_cov_idxs // advantages.shape[1], large_cov_idxs % advantages.shape[1]
                ]

    # Apply rollout correction weights if provided
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights

    pg_loss = agg_loss(
        loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info
    )
    pg_metrics = {
        "actor/ppo_kl": ppo_kl_abs.detach().item(),
    }
    return pg_loss, pg_metrics


def compute_policy_loss_bypass_mode(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: ActorConfig | None = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Bypass mode (patch 0005): with ``rollout_is_batch_normalize``, the IS weights are divided by the mini-batch's
    mean the engine worker hands each micro-batch in ``config.policy_loss_inputs["rollout_is_batch_mean"]`` (one
    copy a row); without it, by this call's own mean as upstream does."""
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask

    assert config is not None, "config is required for bypass_mode loss"

    # Extract rollout_correction config from policy_loss
    rollout_corr_config = config.policy_loss.get("rollout_correction", None) if hasattr(config, "policy_loss") else None

    if rollout_corr_config is None:
        raise ValueError(
            "rollout_correction config not found in policy_loss. "
            "When using loss_mode='bypass_mode', ensure rollout_correction config is passed."
        )

    # Extract parameters
    loss_type = rollout_corr_config.get("loss_type", "ppo_clip")
    rollout_is = rollout_corr_config.get("rollout_is", None)
    rollout_is_threshold = rollout_corr_config.get("rollout_is_threshold", 2.0)
    rollout_is_batch_normalize = rollout_corr_config.get("rollout_is_batch_normalize", False)
    rollout_rs = rollout_corr_config.get("rollout_rs", None)
    rollout_rs_threshold = rollout_corr_config.get("rollout_rs_threshold", None)

    # In bypass mode: old_log_prob IS rollout_log_prob
    rollout_log_prob = old_log_prob

    # With rollout_is_batch_normalize, the engine workers compute the weights' mean over the whole optimizer
    # mini-batch, across data-parallel ranks (compute_rollout_is_batch_mean), and ppo_loss hands it to each
    # micro-batch with its rows (one copy a row). Without it (direct callers), the mean is this call's.
    batch_mean = config.policy_loss_inputs.get("rollout_is_batch_mean")
    rollout_is_batch_mean = batch_mean[0] if batch_mean is not None else None

    # Compute IS weights and rejection mask
    # Note: For PPO-clip, we still compute IS weights for metrics, but don't apply them
    with torch.no_grad():
        rollout_is_weights_proto, modified_response_mask, rollout_metrics = (
            compute_rollout_correction_and_rejection_mask(
                old_log_prob=log_prob,  # Current policy (for IS ratio: π_current / π_rollout)
                rollout_log_prob=rollout_log_prob,  # Rollout policy
                response_mask=response_mask,
                rollout_is=rollout_is,
                rollout_is_threshold=rollout_is_threshold,
                rollout_is_batch_normalize=rollout_is_batch_normalize,
                rollout_rs=rollout_rs,
                rollout_rs_threshold=rollout_rs_threshold,
                rollout_is_batch_mean=rollout_is_batch_mean,
            )
        )

    # Extract IS weights tensor (or None if disabled)
    computed_is_weights = rollout_is_weights_proto.batch["rollout_is_weights"] if rollout_is_weights_proto else None

    # Apply rejection mask (RS + veto)
    effective_mask = modified_response_mask

    # Dispatch to appropriate loss function based on loss_type
    if loss_type == "reinforce":
        # REINFORCE: Apply IS weights explicitly
        pg_loss, pg_metrics = compute_policy_loss_reinforce(
            rollout_log_prob=rollout_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=effective_mask,
            loss_agg_mode=loss_agg_mode,
            config=config,
            rollout_is_weights=computed_is_weights,
        )

    elif loss_type == "ppo_clip":
        # PPO-clip: The ratio π_current/π_old = π_current/π_rollout already handles IS
        # DO NOT apply IS weights - would be double-counting!
        # The clipping mechanism constrains the effective IS ratio
        pg_loss, pg_metrics = compute_policy_loss_vanilla(  # type: ignore[call-arg]
            old_log_prob=rollout_log_prob,  # = old_log_prob in bypass mode
            log_prob=log_prob,
            advantages=advantages,
            response_mask=effective_mask,
            loss_agg_mode=loss_agg_mode,
            config=config,
            rollout_is_weights=None,  # Explicitly None - no IS weights for PPO-clip
        )

    else:
        raise ValueError(f"Invalid loss_type: {loss_type}. Must be 'reinforce' or 'ppo_clip'.")

    # Merge rollout correction metrics
    pg_metrics.update(rollout_metrics)

    return pg_loss, pg_metrics


def _mini_batch_covariance(
    advantages: torch.Tensor, log_prob: torch.Tensor, valid: torch.Tensor, dp_group
) -> tuple[torch.Tensor, int]:
    """Each token's (A - mean A) * (logp - mean logp), with the means over the valid tokens of the whole mini-batch
    (one all-reduce of two sums and the count), and that count; what Clip-Cov and KL-Cov rank."""
    advantages = advantages.detach().double()
    log_prob = log_prob.detach().double()
    sums = torch.stack([advantages[valid].sum(), log_prob[valid].sum(), valid.sum().double()])
    if dp_group is not None:
        torch.distributed.all_reduce(sums, group=dp_group)
    num_tokens = int(sums[2].item())
    return (advantages - sums[0] / sums[2]) * (log_prob - sums[1] / sums[2]), num_tokens


def _global_top_k(scores: torch.Tensor, eligible: torch.Tensor, k: int, dp_group) -> torch.Tensor:
    """The k eligible tokens with the largest scores over all ranks of ``dp_group``, as a mask shaped like ``scores``:
    the global top-k lies within the ranks' own top-k, so one all-gather of k values a rank finds how many of them
    each rank holds (equal values go to the lower rank). Fewer eligible tokens than k: all of them."""
    lowest = -torch.inf if scores.is_floating_point() else torch.iinfo(scores.dtype).min
    flat = scores.masked_fill(~eligible, lowest).reshape(-1)
    local_k = min(k, flat.numel())
    top_values, top_idx = torch.topk(flat, local_k)
    top_values = torch.cat([top_values, top_values.new_full((k - local_k,), lowest)])
    if dp_group is not None:
        gathered = [torch.empty_like(top_values) for _ in range(torch.distributed.get_world_size(dp_group))]
        torch.distributed.all_gather(gathered, top_values, group=dp_group)
        rank = torch.distributed.get_rank(dp_group)
    else:
        gathered, rank = [top_values], 0
    # a stable sort keeps equal values in rank order: how many of the k largest this rank holds
    order = torch.sort(torch.cat(gathered), descending=True, stable=True).indices[:k]
    num_chosen = (order // k == rank).sum()
    chosen = torch.arange(local_k, device=flat.device) < num_chosen
    mask = torch.zeros_like(flat, dtype=torch.bool).scatter(0, top_idx, chosen)
    return mask.reshape(scores.shape) & eligible


def compute_kl_cov_mask(
    advantages: torch.Tensor,
    log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    config: ActorConfig,
    dp_group: torch.distributed.ProcessGroup | None = None,
) -> torch.Tensor:
    """
    Choose the tokens that KL-Cov penalizes over a whole optimizer mini-batch, across data-parallel ranks.

    Within one call, compute_policy_loss_kl_cov takes the top-k tokens by covariance with the means of its own
    micro-batch and k = max(1, int(kl_cov_ratio * its valid tokens)), so the micro-batch size, dynamic or fixed,
    and the number of ranks change which tokens are penalized, and how many. Called once per mini-batch before
    the engine splits it, this makes the choice one call over the whole mini-batch would make: the means over
    the mini-batch's valid tokens (one all-reduce), k from their number, and the exact global top-k without
    gathering the tokens (each rank's own top-k, then one all-gather of k values; equal values go to the lower
    rank). The ranking stays on the device: one host sync, for k.

    Args:
        advantages (torch.Tensor):
            Advantage estimates of this rank's part of the mini-batch, shape (batch_size, response_length).
        log_prob (torch.Tensor):
            Log-probabilities under the current policy, shape (batch_size, response_length).
        response_mask (torch.Tensor):
            Mask of the valid tokens, shape (batch_size, response_length).
        config (ActorConfig):
            The actor config; reads policy_loss.kl_cov_ratio.
        dp_group (torch.distributed.ProcessGroup, optional):
            The data-parallel group that holds the rest of the mini-batch. None: this rank holds all of it.

    Returns:
        torch.Tensor: the chosen tokens, a bool mask of shape (batch_size, response_length).
    """
    kl_cov_ratio = config.policy_loss.kl_cov_ratio if config.policy_loss.kl_cov_ratio is not None else 0.0002
    assert kl_cov_ratio > 0, "kl_cov_ratio should be larger than 0."

    valid = response_mask.bool()
    cov, num_tokens = _mini_batch_covariance(advantages, log_prob, valid, dp_group)
    if num_tokens == 0:
        return torch.zeros_like(valid)
    return _global_top_k(cov, valid, max(1, int(num_tokens * kl_cov_ratio)), dp_group)


def _mix31(x: torch.Tensor) -> torch.Tensor:
    """A 31-bit integer hash (two multiply-xorshift rounds), in int64 arithmetic that cannot overflow."""
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & 0x7FFFFFFF
    return (x >> 16) ^ x


def compute_clip_cov_mask(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: ActorConfig,
    row_ids: torch.Tensor,
    seed: int,
    dp_group: torch.distributed.ProcessGroup | None = None,
) -> torch.Tensor:
    """
    Choose the tokens that Clip-Cov clips over a whole optimizer mini-batch, across data-parallel ranks.

    Within one call, compute_policy_loss_clip_cov draws clip_num = max(1, int(clip_cov_ratio * its valid tokens))
    tokens with torch.randperm from its own candidates (clip_cov_lb < covariance < clip_cov_ub, with the means of
    its own micro-batch, and not already clipped by PPO), so the split and the number of ranks change which tokens
    are clipped and how many, and the draw depends on the global RNG's history. Called once per mini-batch before
    the engine splits it, this takes the candidates with the means of the whole mini-batch and clip_num from its
    valid tokens, and picks the clip_num candidates with the smallest keys, a hash of (seed, row_ids, position):
    a uniform random subset that depends only on the mini-batch and the seed, found by the same exchange as
    compute_kl_cov_mask.

    Args:
        old_log_prob (torch.Tensor):
            Log-probabilities under the old policy, shape (batch_size, response_length).
        log_prob (torch.Tensor):
            Log-probabilities under the current policy, shape (batch_size, response_length).
        advantages (torch.Tensor):
            Advantage estimates of this rank's part of the mini-batch, shape (batch_size, response_length).
        response_mask (torch.Tensor):
            Mask of the valid tokens, shape (batch_size, response_length).
        config (ActorConfig):
            The actor config; reads the clip ratios and policy_loss.clip_cov_ratio, clip_cov_lb, clip_cov_ub.
        row_ids (torch.Tensor):
            Each row's index in the whole mini-batch over all ranks, shape (batch_size,).
        seed (int):
            Seed of the pick; a different one for each update gives a fresh draw.
        dp_group (torch.distributed.ProcessGroup, optional):
            The data-parallel group that holds the rest of the mini-batch. None: this rank holds all of it.

    Returns:
        torch.Tensor: the chosen tokens, a bool mask of shape (batch_size, response_length).
    """
    policy_loss = config.policy_loss
    clip_cov_ratio = policy_loss.clip_cov_ratio if policy_loss.clip_cov_ratio is not None else 0.0002
    clip_cov_lb = policy_loss.clip_cov_lb if policy_loss.clip_cov_lb is not None else 1.0
    clip_cov_ub = policy_loss.clip_cov_ub if policy_loss.clip_cov_ub is not None else 5.0
    cliprange_low = config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio
    cliprange_high = config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
    assert clip_cov_ratio > 0, "clip_ratio should be larger than 0."

    valid = response_mask.bool()
    cov, num_tokens = _mini_batch_covariance(advantages, log_prob, valid, dp_group)
    if num_tokens == 0:
        return torch.zeros_like(valid)
    # the candidates of compute_policy_loss_clip_cov: not clipped by PPO, covariance within the bounds
    ratio = torch.exp(log_prob.detach() - old_log_prob)
    clipped = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high) > -advantages * ratio
    candidates = valid & ~clipped & (cov > clip_cov_lb) & (cov < clip_cov_ub)

    positions = torch.arange(valid.shape[1], device=valid.device)
    rows = _mix31((row_ids.to(valid.device).long() ^ _mix31(torch.tensor(seed & 0x7FFFFFFF))) & 0x7FFFFFFF)
    high = _mix31(rows[:, None] ^ positions)
    keys = (high << 31) | _mix31(high ^ 0x2545F49)  # 62 bits: no two tokens share a key in practice
    return _global_top_k(-keys, candidates, max(1, int(num_tokens * clip_cov_ratio)), dp_group)
