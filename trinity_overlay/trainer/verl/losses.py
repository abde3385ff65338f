"""Mirror of ``trinity.trainer.verl.losses``: `TrinityPolicyLoss`, `engine_batch_info` and `build_trinity_loss` as
patches 0001, 0003, 0005 and 0009 leave them.

Only the members the patches change or add. `__call__` and `_micro_batch_weight` are set on the upstream class
itself, so every instance (made before activation, in another module, or unpickled in a Ray worker) uses them;
`__init__` replaces the code of upstream's own `__init__`, so that it runs in the upstream module's namespace (its
``get_logger``, as tests patch it; the logger is named after the upstream module).
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from trinity.algorithm import ENTROPY_LOSS_FN, KL_FN, POLICY_LOSS_FN
from trinity.algorithm.kl_fn.kl_fn import DummyKLFn
from trinity.algorithm.utils import prefix_metrics
from trinity.utils.log import get_logger
from verl.utils import tensordict_utils as tu
from verl.workers.utils.padding import no_padding_2_padding


class TrinityPolicyLoss:
    """The patched members of ``trinity.trainer.verl.losses.TrinityPolicyLoss``; never instantiated itself."""

    def __init__(self, algo_config, fix_actor_microbatch_loss_scale: bool = False) -> None:  # type: ignore[no-untyped-def]
        self.policy_loss_fn = POLICY_LOSS_FN.get(algo_config.policy_loss_fn)(
            backend="verl", **algo_config.policy_loss_fn_args
        )
        self.kl_loss_fn = KL_FN.get(algo_config.kl_loss_fn)(**algo_config.kl_loss_fn_args)
        self.entropy_loss_fn = ENTROPY_LOSS_FN.get(algo_config.entropy_loss_fn)(**algo_config.entropy_loss_fn_args)
        self.calculate_entropy = algo_config.entropy_loss_fn != "none"
        self.loss_agg_mode = algo_config.loss_agg_mode
        self.use_kl_loss = not isinstance(self.kl_loss_fn, DummyKLFn)
        self.fix_actor_microbatch_loss_scale = fix_actor_microbatch_loss_scale
        self.policy_loss_aggregation = self.policy_loss_fn.loss_aggregation
        if fix_actor_microbatch_loss_scale and self.policy_loss_aggregation is None:
            get_logger("trinity.trainer.verl.losses").warning(
                f"Policy loss `{algo_config.policy_loss_fn}` does not declare its "
                "`loss_aggregation`; veRL's engine weights it by its share of sequences, which "
                "keeps its gradient independent of the micro-batch split only if it is a mean "
                "over sequences."
            )
        elif fix_actor_microbatch_loss_scale and self.policy_loss_aggregation == "micro-batch-weighted":
            get_logger("trinity.trainer.verl.losses").warning(
                f"Policy loss `{algo_config.policy_loss_fn}` weights each micro-batch itself, by "
                "its share of usual and expert sequences from its `policy_loss_fn_args` "
                "(use_dynamic_bsz, ppo_mini_batch_size, ngpus_trainer, train_batch_size_usual, "
                "train_batch_size_expert), as the legacy trainer expects. Under veRL's engine its "
                "gradient depends on the micro-batch split unless those settings match the real "
                "batch, its GRPO and SFT parts use a sequence-mean `loss_agg_mode` and the "
                "entropy term is off."
            )

    def __call__(
        self,
        model_output: dict,
        data: TensorDict,
        dp_group=None,
    ) -> tuple[torch.Tensor, dict]:
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
        # a policy loss that declares them as runtime keys (PR #616's M2PO) normalizes itself with the engine's batch
        # info; outside the engine it gets None and normalizes within the batch
        runtime_inputs = {}
        if getattr(self.policy_loss_fn, "_runtime_keys", None):
            runtime_inputs = {
                "batch_num_tokens": tu.get_non_tensor_data(data=data, key="batch_num_tokens", default=None),
                "dp_size": tu.get_non_tensor_data(data=data, key="dp_size", default=1),
            }
        pg_loss, pg_loss_metrics = self.policy_loss_fn(logprob=log_prob, **runtime_inputs, **model_inputs)
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

        # an instance built before the overlay was on, or unpickled from a process without it, has upstream's
        # attributes only: the switch off, as upstream's __init__ leaves it
        if not getattr(self, "fix_actor_microbatch_loss_scale", False):
            return policy_loss, metrics
        # each term is weighted by the share its own aggregation needs (see _micro_batch_weight);
        # usually all terms aggregate alike, and one weight and one multiplication do
        dp_size = engine_batch_info(data, "dp_size")
        term_weight = self._micro_batch_weight(self.loss_agg_mode, data, response_mask, dp_size)
        if self.policy_loss_aggregation == self.loss_agg_mode:
            return policy_loss * term_weight, metrics
        policy_weight = self._micro_batch_weight(self.policy_loss_aggregation, data, response_mask, dp_size)
        return pg_loss * policy_weight + (policy_loss - pg_loss) * term_weight, metrics

    def _micro_batch_weight(
        self,
        loss_agg_mode: str | None,
        data: TensorDict,
        response_mask: torch.Tensor,
        dp_size: int,
    ) -> torch.Tensor | float:
        """The micro-batch's share of the global mini-batch for a term aggregated by ``loss_agg_mode``, times
        dp_size.

        A mean over pairs, and a loss that weights its micro-batch itself for the legacy trainer (which scaled
        each micro-batch by its share of sequences), take the share of sequences, as does a loss that declares no
        aggregation. A loss that normalizes itself over the global mini-batch already returns its share. Stays on
        device: no host synchronization.

        Args:
            loss_agg_mode (Optional[str]): how the term aggregates (see `PolicyLossFn.loss_aggregation`).
            data (TensorDict): the micro-batch, with the engine's `batch_num_tokens` and `global_batch_size`,
                read strictly (`engine_batch_info`) and only where the share needs them.
            response_mask (torch.Tensor): response mask of the micro-batch, (bsz, response_length).
            dp_size (int): data parallel size.

        Returns:
            Union[torch.Tensor, float]: the weight.
        """
        if loss_agg_mode == "self-normalized":
            return 1.0  # the loss returns its share of the global mini-batch itself
        if loss_agg_mode == "seq-mean-token-sum-norm":
            return float(dp_size)  # a sum over the micro-batch already: only undo the data parallel averaging
        if loss_agg_mode == "token-mean":
            return response_mask.sum() / (engine_batch_info(data, "batch_num_tokens") / dp_size)
        return response_mask.shape[0] * dp_size / engine_batch_info(data, "global_batch_size")


def engine_batch_info(data: TensorDict, key: str):  # type: ignore[no-untyped-def]
    """Read a value that veRL's engine attaches to the mini-batch before splitting it; a `KeyError` naming it when
    the micro-batch lacks it."""
    value = tu.get_non_tensor_data(data=data, key=key, default=None)
    if value is None:
        raise KeyError(
            f"`fix_actor_microbatch_loss_scale` needs `{key}` in the micro-batch, which veRL's "
            "engine sets before splitting the mini-batch; it is missing. Call the loss through "
            "the engine, or set the switch off."
        )
    return value


def build_trinity_loss(algo_config, fix_actor_microbatch_loss_scale: bool = False):  # type: ignore[no-untyped-def]
    """Build a TrinityPolicyLoss instance for veRL's engine API."""
    return TrinityPolicyLoss(algo_config, fix_actor_microbatch_loss_scale)
