"""Mirror of ``trinity.algorithm.policy_loss_fn.policy_loss_fn``: what patches 0003 and 0004 add to `PolicyLossFn`.

Set on the upstream base class itself, so every registered loss (and any loss a user derives) inherits them.
"""

from __future__ import annotations


class PolicyLossFn:
    """The added members of ``PolicyLossFn``; never instantiated itself."""

    # 0004: consecutive rows the loss compares with each other (e.g. a DPO pair), which a trainer must keep in one
    # micro-batch, in their order
    group_size: int = 1

    @property
    def loss_aggregation(self) -> str | None:
        """0003: how the loss aggregates a batch, so that a trainer can weight each micro-batch.

        veRL's engine sums the losses of the micro-batches of a mini-batch, so each one must be weighted by its
        share of the mini-batch, and that share depends on what the loss averages over. One of the
        `aggregate_loss` modes ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
        "seq-mean-token-sum-norm"), "pair-mean" (a mean over chosen/rejected pairs) or "micro-batch-weighted"
        (the loss weights each micro-batch itself, for the legacy trainer). Losses with a `loss_agg_mode` use
        it; None means that the loss does not say.
        """
        return getattr(self, "loss_agg_mode", None)
