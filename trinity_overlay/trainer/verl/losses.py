"""Mirror of ``trinity.trainer.verl.losses``: `TrinityPolicyLoss` as patch 0001 makes it (global normalization).

Only the methods the patch changes or adds; they are set on the upstream class itself, so every instance (made
before activation, in another module, or unpickled in a Ray worker) uses them.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from trinity.algorithm.utils import prefix_metrics
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import no_padding_2_padding


class TrinityPolicyLoss:
    """The patched members of ``trinity.trainer.verl.losses.TrinityPolicyLoss``; never instantiated itself."""

    def __call__(
        self,
        model_output: dict,
        data: TensorDict,
        dp_group=None,
    ) -> tuple[torch.Tensor, dict]:
        # read before select() below: the engine's global batch info, absent outside the engine
        dp_size = tu.get_non_tensor_data(data=data, key="dp_size", default=1)
        batch_num_tokens = tu.get_non_tensor_data(data=data, key="batch_num_tokens", default=None)
        global_batch_size = tu.get_non_tensor_data(data=data, key="global_batch_size", default=None)

        log_prob = no_padding_2_padding(model_output["log_probs"], data)
        entropy = model_output.get("entropy", None)
        if entropy is not None:
            entropy = no_padding_2_padding(entropy, data)

        fields = ["response_mask", *self.policy_loss_fn.select_keys]
        if self.use_kl_loss:
            fields.append("ref_log_prob")
            if "old_log_probs" in data.keys():
                fields.append("old_log_probs")
        fields = list(dict.fromkeys(fields))
        padded_data = data.select(*fields).to_padded_tensor()

        response_mask = padded_data["response_mask"].to(bool)
        model_inputs = {"response_mask": response_mask}
        model_inputs.update(
            {key: padded_data[key] for key in fields if key != "response_mask" and key in padded_data.keys()}
        )

        metrics: dict = {}
        pg_loss, pg_loss_metrics = self.policy_loss_fn(logprob=log_prob, **model_inputs)
        prefix_metrics(src_metrics=pg_loss_metrics, prefix="actor", dst_metrics=metrics)
        policy_loss = pg_loss

        if self.calculate_entropy and entropy is not None:
            entropy_loss, entropy_loss_metrics = self.entropy_loss_fn(
                entropy=entropy,
                action_mask=response_mask,
                loss_agg_mode=self.loss_agg_mode,
                **model_inputs,
            )
            prefix_metrics(src_metrics=entropy_loss_metrics, prefix="actor", dst_metrics=metrics)
            policy_loss = policy_loss - entropy_loss

        if self.use_kl_loss:
            kl_loss, kl_loss_metrics = self.kl_loss_fn.calculate_kl_loss(
                logprob=log_prob,
                ref_logprob=model_inputs.get("ref_log_prob", None),
                response_mask=response_mask,
                loss_agg_mode=self.loss_agg_mode,
                old_logprob=model_inputs.get("old_log_probs", None),
            )
            prefix_metrics(src_metrics=kl_loss_metrics, prefix="actor", dst_metrics=metrics)
            policy_loss = policy_loss + kl_loss

        # the logged loss stays the micro-batch's own (unscaled) combined loss
        metrics["final_loss"] = policy_loss.detach().item()
        weight = self._micro_batch_weight(
            response_mask,
            dp_size=dp_size,
            batch_num_tokens=batch_num_tokens,
            global_batch_size=global_batch_size,
        )
        return policy_loss * weight, metrics

    def _micro_batch_weight(
        self,
        response_mask: torch.Tensor,
        dp_size: int,
        batch_num_tokens: int | None,
        global_batch_size: int | None,
    ) -> torch.Tensor | float:
        """The micro-batch's share of the global mini-batch, times dp_size; 1.0 without the engine's batch info.

        veRL's engine sums the micro-batch losses and data parallelism averages gradients over ranks, while the
        losses above are normalized within the micro-batch. Stays on device: no host synchronization.

        Args:
            response_mask (torch.Tensor): response mask of the micro-batch, (bsz, response_length).
            dp_size (int): data parallel size.
            batch_num_tokens (Optional[int]): response tokens in the global mini-batch.
            global_batch_size (Optional[int]): sequences in the global mini-batch.

        Returns:
            Union[torch.Tensor, float]: the weight.
        """
        loss_agg_mode = getattr(self.policy_loss_fn, "loss_agg_mode", None)
        if loss_agg_mode == "seq-mean-token-sum-norm":
            return float(dp_size)  # a sum over the micro-batch already: only undo the data parallel averaging
        if loss_agg_mode == "token-mean":
            return 1.0 if batch_num_tokens is None else response_mask.sum() / batch_num_tokens * dp_size
        # the seq-mean modes, and losses without a loss_agg_mode (DPO), average over sequences
        return 1.0 if global_batch_size is None else response_mask.shape[0] / global_batch_size * dp_size
