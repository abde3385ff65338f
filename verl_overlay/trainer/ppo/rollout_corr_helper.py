"""Mirror of ``verl.trainer.ppo.rollout_corr_helper``: the IS weights normalized by the optimizer mini-batch's mean
(patch 0005), and ``compute_rollout_is_batch_mean``, which computes that mean across data-parallel ranks. On verl
0.7.1 (the verl-0.7 series' 0004) the last two are the same code, and ``compute_rollout_correction_weights`` is
0.7.1's own (`verl_overlay.trainer.ppo.rollout_corr_helper_v0_7`): so this module imports there too.

Installed by replacing the upstream functions' code in place (`patchset_overlay.replace`), so they run in
``verl.trainer.ppo.rollout_corr_helper``'s own namespace: every global below must be the very object that module
holds. ``compute_rollout_is_batch_mean`` is added to that module, bound to its namespace too.
"""

from __future__ import annotations

import torch
import verl.utils.torch_functional as verl_F
from verl.protocol import DataProto
from verl.trainer.ppo.rollout_corr_helper import (
    SAFETY_BOUND,
    compute_is_metrics,
    compute_offpolicy_metrics,
    compute_rollout_rejection_mask,
)

try:  # read by 0.8.0's compute_rollout_correction_weights only; verl 0.7.1 has no IcePop thresholds
    from verl.trainer.ppo.rollout_corr_helper import _parse_rollout_is_threshold
except ImportError:  # verl 0.7.1: its piece takes rollout_corr_helper_v0_7's compute_rollout_correction_weights
    pass

# the function patch 0005 adds to the module
ADDED_FUNCTIONS = ("compute_rollout_is_batch_mean",)


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: str | float = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_is_batch_mean: torch.Tensor | None = None,
    with_metrics: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance-sampling weights of the rollout, truncated (TIS) or masked (IcePop), optionally normalized to mean 1
    (patch 0005): by ``rollout_is_batch_mean`` when given (the optimizer mini-batch's mean,
    `compute_rollout_is_batch_mean`), else by this call's own mean as upstream does; ``with_metrics`` False skips
    the metrics (each a host sync)."""
    # Validate input parameters
    valid_is_levels = {"token", "sequence"}
    if rollout_is not in valid_is_levels:
        raise ValueError(f"Invalid rollout_is: {rollout_is}. Must be one of {valid_is_levels}.")
    rollout_is_threshold_upper, rollout_is_threshold_lower = _parse_rollout_is_threshold(rollout_is_threshold)
    use_icepop = rollout_is_threshold_lower is not None

    # Compute IS weights from log ratio (handles different aggregation levels)
    if rollout_is == "token":
        # Per-token IS weight: exp(log(π_train/π_rollout)) with safety clamp
        log_ratio_for_metrics: torch.Tensor = log_ratio
        log_ratio_safe: torch.Tensor = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        raw_rollout_is_weights: torch.Tensor = torch.exp(log_ratio_safe)

    elif rollout_is == "sequence":
        # Sequence-level IS weight: product of token ratios (exp(sum(log ratios)))
        log_ratio_sum: torch.Tensor = verl_F.masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(
            -1
        )  # Shape: (batch_size, 1)
        log_ratio_for_metrics = log_ratio_sum

        log_ratio_sum_safe: torch.Tensor = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        raw_rollout_is_weights = torch.exp(log_ratio_sum_safe).expand_as(log_ratio)  # Broadcast to sequence length

    else:
        raise ValueError(f"Unsupported rollout_is: {rollout_is}")

    # Zero out weights for padding tokens using response mask
    raw_rollout_is_weights = raw_rollout_is_weights * response_mask

    # Apply TIS for a single upper bound and IcePop for a lower_upper string.
    if not use_icepop:
        rollout_is_weights = raw_rollout_is_weights.clamp(max=rollout_is_threshold_upper)
    else:
        assert rollout_is_threshold_lower is not None
        token_kept_mask = (raw_rollout_is_weights >= rollout_is_threshold_lower) & (
            raw_rollout_is_weights <= rollout_is_threshold_upper
        )
        rollout_is_weights = torch.where(
            token_kept_mask, raw_rollout_is_weights, torch.zeros_like(raw_rollout_is_weights)
        )

    # Compute IS weight metrics.
    metrics: dict[str, float] = {}
    if with_metrics:
        metrics = compute_is_metrics(
            rollout_is_weights=rollout_is_weights,
            raw_rollout_is_weights=raw_rollout_is_weights,
            log_ratio_for_metrics=log_ratio_for_metrics,
            response_mask=response_mask,
            rollout_is=rollout_is,
            rollout_is_threshold=rollout_is_threshold_upper,
            rollout_is_threshold_lower=rollout_is_threshold_lower,
        )
    if use_icepop and with_metrics:
        assert rollout_is_threshold_lower is not None
        oob_mask = (raw_rollout_is_weights < rollout_is_threshold_lower) | (
            raw_rollout_is_weights > rollout_is_threshold_upper
        )
        metrics["rollout_is_oob_ratio"] = verl_F.masked_mean(oob_mask.float(), response_mask).item()

    # Detach weights to prevent gradient flow (mathematically required by IS theory)
    # IS weights change the measure, not the objective. See §3.2.2 in docs/algo/rollout_corr_math.md
    rollout_is_weights = rollout_is_weights.detach()

    # Apply batch normalization if requested
    if rollout_is_batch_normalize and rollout_is_batch_mean is not None:
        # the mean over the whole optimizer mini-batch, across data-parallel ranks: the same for every micro-batch
        weights_mean = rollout_is_batch_mean.to(rollout_is_weights.device)
    elif rollout_is_batch_normalize:
        # Compute mean based on aggregation level
        mask_float = response_mask.to(dtype=rollout_is_weights.dtype)
        if rollout_is == "token":
            # Token-level: normalize over all token weights
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                weights_mean = verl_F.distributed_masked_mean(rollout_is_weights, mask_float)
            else:
                weights_mean = verl_F.masked_mean(rollout_is_weights, response_mask)
        elif rollout_is == "sequence":
            # Sequence-level: normalize over sequence weights (one weight per sequence)
            # For each sequence, compute mean over valid tokens (they all have the same weight)
            # then average across sequences
            seq_weights = verl_F.masked_mean(rollout_is_weights, response_mask, axis=-1)  # (batch_size,)
            seq_mask = (response_mask.sum(dim=-1) > 0).to(dtype=rollout_is_weights.dtype)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                weights_mean = verl_F.distributed_masked_mean(seq_weights, seq_mask)
            else:
                weights_mean = (seq_weights * seq_mask).sum() / seq_mask.sum().clamp_min(1e-8)
        else:
            raise ValueError(f"Unsupported rollout_is: {rollout_is}")

    if rollout_is_batch_normalize:
        # Normalize to mean=1.0 (avoid division by zero)
        if weights_mean > 1e-8:
            rollout_is_weights = rollout_is_weights / weights_mean
            metrics["rollout_is_batch_norm_factor"] = weights_mean.item()
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0

    return rollout_is_weights, metrics


def compute_rollout_is_batch_mean(
    log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: str | float = 2.0,
    dp_group: torch.distributed.ProcessGroup | None = None,
) -> torch.Tensor:
    """Compute the mean of the truncated IS weights over a whole optimizer mini-batch, across data-parallel ranks.

    With rollout_is_batch_normalize, compute_rollout_correction_weights divides the weights by their mean over its
    own call. The engine calls the loss once per micro-batch (and all-reduces that mean over one micro-batch index
    of every rank), so the micro-batch split, fixed or by token budget, changed the mean and the update. Called once
    per mini-batch before the engine splits it, this gives the mean one call over the whole mini-batch would take;
    pass it to compute_rollout_correction_weights as rollout_is_batch_mean.

    Args:
        log_prob: Log probabilities under the current policy, shape (batch_size, seq_length).
        rollout_log_prob: Log probabilities under the rollout policy, shape (batch_size, seq_length).
        response_mask: Binary mask for valid tokens (1=valid, 0=padding), shape (batch_size, seq_length).
        rollout_is: IS weight aggregation level, "token" (mean over the valid tokens) or "sequence" (mean over the
            sequences with a valid token).
        rollout_is_threshold: Threshold specification for IS weights (see compute_rollout_correction_weights).
        dp_group: The data-parallel group that holds the rest of the mini-batch. None: this rank holds all of it.

    Returns:
        torch.Tensor: The mean, a scalar (0 where the mini-batch has no valid token).
    """
    weights, _ = compute_rollout_correction_weights(
        log_ratio=log_prob - rollout_log_prob,
        response_mask=response_mask,
        rollout_is=rollout_is,
        rollout_is_threshold=rollout_is_threshold,
        with_metrics=False,
    )
    mask = response_mask.to(dtype=weights.dtype)
    if rollout_is == "sequence":
        # one weight per sequence with a valid token (all its tokens carry it)
        weights = verl_F.masked_mean(weights, mask, axis=-1)
        mask = (mask.sum(dim=-1) > 0).to(dtype=weights.dtype)
    # one all-reduce of the sum and the count
    totals = torch.stack([(weights * mask).sum(), mask.sum()])
    if dp_group is not None:
        torch.distributed.all_reduce(totals, op=torch.distributed.ReduceOp.SUM, group=dp_group)
    return totals[0] / totals[1].clamp_min(1)


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: str | float | None = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: str | None = None,
    rollout_rs_threshold: str | float | None = None,
    rollout_is_batch_mean: torch.Tensor | None = None,
) -> tuple[DataProto | None, torch.Tensor, dict[str, float]]:
    """IS weights, rejection mask and metrics of the rollout correction (patch 0005: ``rollout_is_batch_mean`` passed
    on to `compute_rollout_correction_weights`)."""
    # Validate input masks
    if not response_mask.any():
        raise ValueError("response_mask must contain at least one valid token (1).")
    if old_log_prob.shape != rollout_log_prob.shape:
        raise ValueError(
            f"old_log_prob shape {old_log_prob.shape} does not match rollout_log_prob shape {rollout_log_prob.shape}."
        )
    if old_log_prob.shape != response_mask.shape:
        raise ValueError(
            f"log_prob shape {old_log_prob.shape} does not match response_mask shape {response_mask.shape}."
        )

    # Step 1: Compute log ratio (log(π_train / π_rollout))
    log_ratio: torch.Tensor = old_log_prob - rollout_log_prob
    metrics: dict[str, float] = {}

    # Step 2: Compute IS weights (if enabled)
    rollout_is_weights: torch.Tensor | None = None
    if rollout_is is not None and rollout_is_threshold is not None:
        rollout_is_weights, is_metrics = compute_rollout_correction_weights(
            log_ratio=log_ratio,
            response_mask=response_mask,
            rollout_is=rollout_is,
            rollout_is_threshold=rollout_is_threshold,
            rollout_is_batch_normalize=rollout_is_batch_normalize,
            rollout_is_batch_mean=rollout_is_batch_mean,
        )
        metrics.update(is_metrics)

    # Step 3: Compute rejection mask (if enabled)
    modified_response_mask: torch.Tensor = response_mask.clone()
    if rollout_rs is not None:
        if rollout_rs_threshold is None:
            raise ValueError(
                "rollout_rs_threshold must be explicitly provided when rollout_rs is enabled. "
                "Set rollout_rs_threshold to the desired threshold value."
            )
        modified_response_mask, rs_metrics = compute_rollout_rejection_mask(
            log_ratio=log_ratio,
            response_mask=response_mask,
            rollout_rs=rollout_rs,
            rollout_rs_threshold=rollout_rs_threshold,
        )
        metrics.update(rs_metrics)

    # Step 4: Compute off-policy metrics (KL, PPL, χ², etc.)
    offpolicy_metrics: dict[str, float] = compute_offpolicy_metrics(
        old_log_prob=old_log_prob,
        rollout_log_prob=rollout_log_prob,
        response_mask=response_mask,
    )
    metrics.update(offpolicy_metrics)

    # Step 6: Add "rollout_corr/" prefix to all metrics for logging consistency
    metrics_scalar: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, torch.Tensor):
            metrics_scalar[f"rollout_corr/{key}"] = value.item()
        else:
            metrics_scalar[f"rollout_corr/{key}"] = value

    # Step 7: Wrap IS weights in DataProto for consistency with API
    rollout_is_weights_proto: DataProto | None = None
    if rollout_is_weights is not None:
        rollout_is_weights_proto = DataProto.from_dict(tensors={"rollout_is_weights": rollout_is_weights})

    return rollout_is_weights_proto, modified_response_mask, metrics_scalar
