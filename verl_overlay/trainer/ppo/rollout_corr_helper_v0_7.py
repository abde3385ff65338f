"""Mirror of ``verl.trainer.ppo.rollout_corr_helper`` on verl 0.7.1, as the verl-0.7 series' 0004 leaves it: the IS
weights normalized by the optimizer mini-batch's mean. 0.7.1's ``compute_rollout_correction_weights`` is not 0.8.0's
(one float threshold, no IcePop; its metrics come before the truncation), so its patched code is a file of its own;
``compute_rollout_correction_and_rejection_mask`` and the added ``compute_rollout_is_batch_mean`` are the same code
on both releases and stay in `verl_overlay.trainer.ppo.rollout_corr_helper`.

Installed by replacing the upstream function's code in place, so it runs in
``verl.trainer.ppo.rollout_corr_helper``'s own namespace: every global below is the very object that module holds.
"""

from __future__ import annotations

import torch
import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.rollout_corr_helper import SAFETY_BOUND, compute_is_metrics


def compute_rollout_correction_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str = "token",
    rollout_is_threshold: float = 2.0,
    rollout_is_batch_normalize: bool = False,
    rollout_is_batch_mean: torch.Tensor | None = None,
    with_metrics: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance-sampling weights of the rollout, truncated (TIS), optionally normalized to mean 1 (verl-0.7 0004):
    by ``rollout_is_batch_mean`` when given (the optimizer mini-batch's mean, `compute_rollout_is_batch_mean`), else
    by this call's own mean as upstream does; ``with_metrics`` False skips the metrics (each a host sync)."""
    # Validate input parameters
    valid_is_levels = {"token", "sequence"}
    if rollout_is not in valid_is_levels:
        raise ValueError(f"Invalid rollout_is: {rollout_is}. Must be one of {valid_is_levels}.")
    if rollout_is_threshold <= 0:
        raise ValueError(f"rollout_is_threshold must be positive, got {rollout_is_threshold}.")

    # Compute IS weights from log ratio (handles different aggregation levels)
    if rollout_is == "token":
        # Per-token IS weight: exp(log(π_train/π_rollout)) with safety clamp
        log_ratio_for_metrics: torch.Tensor = log_ratio
        log_ratio_safe: torch.Tensor = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights: torch.Tensor = torch.exp(log_ratio_safe)

    elif rollout_is == "sequence":
        # Sequence-level IS weight: product of token ratios (exp(sum(log ratios)))
        log_ratio_sum: torch.Tensor = verl_F.masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(
            -1
        )  # Shape: (batch_size, 1)
        log_ratio_for_metrics = log_ratio_sum

        log_ratio_sum_safe: torch.Tensor = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_sum_safe).expand_as(log_ratio)  # Broadcast to sequence length

    else:
        raise ValueError(f"Unsupported rollout_is: {rollout_is}")

    # Zero out weights for padding tokens using response mask
    rollout_is_weights = rollout_is_weights * response_mask

    # Compute IS weight metrics (BEFORE truncation to get accurate fraction_high/low)
    metrics: dict[str, float] = {}
    if with_metrics:
        metrics = compute_is_metrics(
            rollout_is_weights=rollout_is_weights,
            log_ratio_for_metrics=log_ratio_for_metrics,
            response_mask=response_mask,
            rollout_is=rollout_is,
            rollout_is_threshold=rollout_is_threshold,
        )

    # Truncate extreme weights (TIS: Truncated Importance Sampling)
    rollout_is_weights = rollout_is_weights.clamp(max=rollout_is_threshold)

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
