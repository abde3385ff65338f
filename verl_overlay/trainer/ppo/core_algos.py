"""Mirror of ``verl.trainer.ppo.core_algos``: ``compute_value_loss`` with the global-batch arguments (patch 0001).

Installed by replacing the upstream function's code in place (`patchset_overlay.replace`), so it runs in
``verl.trainer.ppo.core_algos``'s own namespace: every global below must be the very object that module holds.
"""

from __future__ import annotations

import torch
import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.core_algos import agg_loss


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
