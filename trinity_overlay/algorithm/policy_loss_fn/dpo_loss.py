"""Mirror of ``trinity.algorithm.policy_loss_fn.dpo_loss``: `DPOLossFn` as patches 0002, 0003 and 0004 make it.

`__call__` (0002) replaces the code of the function Trinity's `PolicyLossFnMeta` wraps, so it runs in the upstream
module's namespace; `loss_aggregation` (0003) and `group_size` (0004) are set on the upstream class.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from trinity.algorithm.utils import masked_sum


class DPOLossFn:
    """The patched and added members of ``DPOLossFn``; never instantiated itself."""

    # 0004: rows come as chosen/rejected pairs
    group_size = 2

    @property
    def loss_aggregation(self) -> str:
        """0003: the mean over chosen/rejected pairs."""
        return "pair-mean"

    def __call__(  # type: ignore[no-untyped-def]
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        action_mask: torch.Tensor,
        **kwargs,
    ) -> tuple[torch.Tensor, dict]:
        """0002: one logit per chosen/rejected pair, the loss the mean over pairs; a batch of unpaired rows refused."""
        rows = logprob.shape[0]
        if rows % 2:
            raise ValueError(
                "DPO reads consecutive rows as chosen/rejected pairs, but got a batch of "
                f"{rows} rows: {rows // 2} pairs and one row without its pair"
            )
        chosen_logprob = logprob[::2]
        rejected_logprob = logprob[1::2]
        chosen_mask = action_mask[::2]
        rejected_mask = action_mask[1::2]
        # one sequence log-prob per response, so that each pair gets its own logit
        chosen_logprob_sum = masked_sum(chosen_logprob, chosen_mask, axis=-1)
        rejected_logprob_sum = masked_sum(rejected_logprob, rejected_mask, axis=-1)

        chosen_ref_logprob = ref_logprob[::2]
        rejected_ref_logprob = ref_logprob[1::2]
        chosen_ref_logprob_sum = masked_sum(chosen_ref_logprob, chosen_mask, axis=-1)
        rejected_ref_logprob_sum = masked_sum(rejected_ref_logprob, rejected_mask, axis=-1)

        chosen_ratios = chosen_logprob_sum - chosen_ref_logprob_sum
        rejected_ratios = rejected_logprob_sum - rejected_ref_logprob_sum
        logits = chosen_ratios - rejected_ratios
        losses = (
            -F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
            - F.logsigmoid(-self.beta * logits) * self.label_smoothing
        )
        loss = losses.mean()
        chosen_reward = self.beta * chosen_ratios.detach().mean().item()
        rejected_reward = self.beta * rejected_ratios.detach().mean().item()
        accuracy_mean = (chosen_ratios.detach() > rejected_ratios.detach()).float().mean().item()
        return loss, {
            "chosen_reward": chosen_reward,
            "rejected_reward": rejected_reward,
            "accuracy_mean": accuracy_mean,
            "dpo_loss": loss.detach().item(),
        }
