"""Mirror of ``trinity.algorithm.policy_loss_fn.mix_policy_loss``: MIX's aggregation as patch 0003 declares it."""

from __future__ import annotations


class MIXPolicyLossFn:
    """The added member of ``MIXPolicyLossFn``; never instantiated itself."""

    @property
    def loss_aggregation(self) -> str:
        """Weights each micro-batch itself, for the legacy trainer's per-micro-batch scale."""
        return "micro-batch-weighted"
