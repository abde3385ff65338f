"""Mirror of ``trinity.algorithm.policy_loss_fn.chord_policy_loss``: MIX_CHORD's aggregation as patch 0003 declares
it."""

from __future__ import annotations


class MIXCHORDPolicyLossFn:
    """The added member of ``MIXCHORDPolicyLossFn``; never instantiated itself."""

    @property
    def loss_aggregation(self) -> str:
        """Weights each micro-batch itself, for the legacy trainer's per-micro-batch scale."""
        return "micro-batch-weighted"
