"""The loss each case trains with, built from the tree under test's own classes and configs."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

# verl's critic, GRPO actor (vanilla policy loss), GMPO, distillation (k3, first call), Trinity's TrinityPolicyLoss,
# KL-Cov and bypass mode's REINFORCE with batch-normalized IS weights (the last two prepared per mini-batch by
# `worker_statistics.before_split`); a fix names its loss's key in `harness` of its parts.toml
# (tests/scripts/test_fix_completeness.py). Not Clip-Cov: docs/gpu-proof.md says why.
LOSSES = ("critic", "ppo", "geo_mean", "distillation", "trinity", "kl_cov", "is_norm")
# KL-Cov's share of the tokens it penalizes and its penalty's weight, as the regression tests take them: with verl's
# defaults (0.0002, 0.1) one token of the tiny preset's 1,500 a mini-batch is penalized, and a split moves the step's
# grad_norm by less than fp32's tolerance (measured: 0.99984 to 1.00000)
KL_COV_RATIO, PPO_KL_COEF = 0.05, 1.0


def loss_function(loss: str, mode: str, strategy: str = "fsdp2") -> Any:
    """The callable verl's engine calls per micro-batch for ``loss`` (one of `LOSSES`) with ``loss_agg_mode`` ``mode``.
    Build a fresh one for each distillation step: verl keeps the global batch info on its configs between calls, and
    the case is a fresh worker's first call."""
    from engine_harness.sim import actor_config

    if loss == "critic":
        from verl.workers.config import CriticConfig
        from verl.workers.utils.losses import value_loss

        from engine_harness.sim import critic_model_fields

        config = CriticConfig(
            strategy=strategy,
            ppo_micro_batch_size_per_gpu=1,
            cliprange_value=0.2,
            loss_agg_mode=mode,
            **critic_model_fields(),
        )
        return partial(value_loss, config)
    if loss in ("ppo", "geo_mean", "kl_cov", "is_norm"):
        from verl.trainer.config.algorithm import RolloutCorrectionConfig
        from verl.workers.config import PolicyLossConfig
        from verl.workers.utils.losses import ppo_loss

        if loss == "kl_cov":
            policy_loss = PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=KL_COV_RATIO, ppo_kl_coef=PPO_KL_COEF)
        elif loss == "is_norm":  # bypass mode's REINFORCE, token-level IS weights truncated at 2 and normalized by
            # their mean (the set-up of verl's examples/rollout_correction, token level)
            correction = RolloutCorrectionConfig(
                rollout_is="token",
                rollout_is_threshold=2.0,
                rollout_is_batch_normalize=True,
                rollout_rs=None,
                bypass_mode=True,
                loss_type="reinforce",
            )
            policy_loss = PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=correction)
        else:
            policy_loss = PolicyLossConfig(loss_mode="vanilla" if loss == "ppo" else "geo_mean")
        terms = {"use_kl_loss": True, "entropy_coeff": 0.01} if loss in ("ppo", "geo_mean") else {}
        return partial(ppo_loss, actor_config(mode, strategy=strategy, policy_loss=policy_loss, **terms))
    if loss == "distillation":
        from verl.trainer.distillation.losses import distillation_ppo_loss
        from verl.workers.config import DistillationConfig, DistillationLossConfig

        loss_config = DistillationLossConfig(loss_mode="k3", use_policy_gradient=False, use_task_rewards=False)
        distillation = DistillationConfig(distillation_loss=loss_config)
        return partial(
            distillation_ppo_loss, config=actor_config(mode, strategy=strategy), distillation_config=distillation
        )
    if loss != "trinity":
        raise ValueError(f"no loss {loss!r}: one of {', '.join(LOSSES)}")
    from trinity.trainer.verl.losses import TrinityPolicyLoss

    from engine_harness.trinity_configs import algorithm_config, default_loss_scale_switch

    config = algorithm_config("grpo", mode)
    if default_loss_scale_switch():  # this patchset's default: the loss its users' actor gets
        return TrinityPolicyLoss(config, fix_actor_microbatch_loss_scale=True)
    return TrinityPolicyLoss(config)  # upstream's default (False)


def engine_modules(losses: Sequence[str]) -> list[str]:
    """The engine and loss modules a rank training ``losses`` imports from the trees under test."""
    names = ["verl", "verl.workers.engine.fsdp.transformer_impl", "verl.workers.utils.losses"]
    names += ["verl.trainer.ppo.core_algos"]
    if "distillation" in losses:
        names += ["verl.trainer.distillation.losses"]
    if "trinity" in losses:
        names += ["trinity", "trinity.trainer.verl.losses", "trinity.trainer.verl.monkey_patch"]
    if {"kl_cov", "is_norm"} & set(losses):
        names += ["verl.workers.engine_workers", "verl.trainer.ppo.rollout_corr_helper"]
    return names
