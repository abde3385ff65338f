"""What KL-Cov's and Clip-Cov's mini-batch selection (verl 0004) and bypass mode's IS batch mean (verl 0005) cost
per optimizer step. Patched, the worker chooses (or takes the mean) once on the mini-batch and each micro-batch's
``ppo_loss`` applies its rows of it; vanilla, each micro-batch's loss does so on its own tokens: one timed call is
the whole mini-batch, at dp 1 (the collectives are not timed).
"""

from __future__ import annotations

from collections.abc import Callable

MICRO_BATCHES = 4  # micro-batches per mini-batch


def selection_step(loss_mode: str, sequences: int) -> Callable[[], None]:
    """One mini-batch of ``MICRO_BATCHES`` micro-batches of ``sequences`` rows each, and ``ppo_loss`` with
    ``loss_mode``: a call of what this returns is the whole mini-batch."""
    import torch
    import verl.trainer.ppo.core_algos as core_algos
    import verl.trainer.ppo.rollout_corr_helper as rollout_corr_helper
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import PolicyLossConfig
    from verl.workers.engine.utils import prepare_micro_batches
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding

    from engine_harness.sim import actor_config, make_rollout_batch, pack_model_output

    rows = MICRO_BATCHES * sequences
    batch = make_rollout_batch(rows, seed=sequences, extra_fields=("old_log_probs", "advantages"))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    noise = torch.randn(batch["old_log_probs"].shape, generator=torch.Generator().manual_seed(7))
    log_probs = batch["old_log_probs"] + 0.1 * noise
    if loss_mode == "is_batch_norm":
        select = getattr(rollout_corr_helper, "compute_rollout_is_batch_mean", None)  # None: vanilla
        rollout_correction = RolloutCorrectionConfig(
            rollout_is="token", rollout_is_batch_normalize=True, bypass_mode=True, loss_type="reinforce"
        )
        policy_loss = PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=rollout_correction)
    else:
        select = getattr(core_algos, f"compute_{loss_mode}_mask", None)  # None: the vanilla tree
        policy_loss = PolicyLossConfig(loss_mode=loss_mode)
    config = actor_config("token-mean", policy_loss=policy_loss)
    data = left_right_2_no_padding(batch.clone())
    tokens = int(batch["response_mask"].sum())
    tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=sequences)
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=tokens, global_batch_size=rows)
    micro_batches, _ = prepare_micro_batches(data=data, dp_group=None, same_micro_num_in_dp=True)
    outputs = [
        {"log_probs": pack_model_output(mb, log_probs[mb["row_id"]]).requires_grad_(True)} for mb in micro_batches
    ]

    def call() -> None:
        if select is not None and loss_mode == "is_batch_norm":
            mean = select(log_probs, batch["old_log_probs"], batch["response_mask"], rollout_is="token")
            for micro_batch in micro_batches:
                micro_batch["rollout_is_batch_mean"] = mean.expand(len(micro_batch))
        elif select is not None:
            advantages, log_prob, response_mask = batch["advantages"], batch["old_log_probs"], batch["response_mask"]
            if loss_mode == "kl_cov":
                mask = select(advantages, log_prob, response_mask, config=config)
            else:
                row_ids = batch["row_id"]
                mask = select(log_prob, log_prob, advantages, response_mask, config=config, row_ids=row_ids, seed=0)
            for micro_batch in micro_batches:
                micro_batch[f"{loss_mode}_mask"] = mask[micro_batch["row_id"]]
        for micro_batch, output in zip(micro_batches, outputs, strict=True):
            ppo_loss(config, output, micro_batch)

    return call
