"""Mirror of ``trinity.algorithm.policy_loss_fn.rec_policy_loss``: REC's aggregation as patch 0003 declares it."""

from __future__ import annotations


class RECPolicyLossFn:
    """The added member of ``RECPolicyLossFn``; never instantiated itself."""

    @property
    def loss_aggregation(self) -> str:
        """Token mean, or sequence mean of token means with the gspo-one-side clipping."""
        if self.clip_mode == "gspo-one-side":
            return "seq-mean-token-mean"
        return "token-mean"
