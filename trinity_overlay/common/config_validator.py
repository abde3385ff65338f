"""Mirror of ``trinity.common.config_validator``: `PolicyLossGroupValidator` as patches 0004 and 0007 leave it, and
the first step 0010 adds to `TrainerConfigValidator.validate`.

A new validator: the installer adds the class to Trinity's module and its instance to Trinity's ``validators`` list,
right after the trainer's own validator, as the patch lists it. Its code reads only its own imports (the two helpers
0004 adds to ``trinity.trainer.verl.config``: from their mirror).

`resolve_loss_scale_switch` (0010) is what the patched `TrainerConfigValidator.validate` does first; the switch-default
piece runs it before upstream's ``validate``.
"""

from __future__ import annotations

import math

from trinity.common.config import Config
from trinity.common.config_validator import ConfigValidator


def resolve_loss_scale_switch(config: Config) -> None:
    """0010: an unset ``trainer.fix_actor_microbatch_loss_scale`` is on for veRL's trainers; Tinker keeps its own
    default (off). An explicit value is kept."""
    if config.trainer.fix_actor_microbatch_loss_scale is None:
        config.trainer.fix_actor_microbatch_loss_scale = config.trainer.trainer_type == "verl"


class PolicyLossGroupValidator(ConfigValidator):
    """Validator for policy losses that compare consecutive rows, such as DPO's pairs.

    On veRL's engine (verl >= 0.8) the veRL trainer passes such a loss's `group_size` to veRL as
    `force_group_size`, and veRL keeps each group of rows whole in one micro-batch: each GPU's
    share of a mini-batch must then divide into whole groups (veRL asserts that only at the first
    update). With a fixed micro-batch size veRL counts `ppo_micro_batch_size_per_gpu` in groups;
    where a GPU's groups do not fill whole micro-batches, the trainer uses the largest size that
    divides them. The legacy trainers (verl < 0.8) check their own sizes.
    """

    def validate(self, config: Config) -> None:
        """Check that each GPU gets whole groups, and say what a micro-batch holds.

        Args:
            config: The global configuration object to validate.

        Raises:
            ValueError: If a GPU's share of a mini-batch would cut a group of rows.
        """
        if config.mode not in ["train", "both", "colocate"] or config.trainer.trainer_type != "verl":
            return
        if config.model.external_model.enable:
            return
        from trinity.algorithm import POLICY_LOSS_FN
        from trinity.trainer.trainer import is_verl_legacy

        name = config.algorithm.policy_loss_fn
        group_size = POLICY_LOSS_FN.get(name).group_size
        if group_size == 1 or is_verl_legacy():
            return
        from trinity.trainer.verl.config import build_verl_config

        from trinity_overlay.trainer.verl.config import actor_data_parallel_size, group_micro_batch_size

        actor = build_verl_config(config).actor
        dp_size = actor_data_parallel_size(config, actor)
        # the veRL trainer counts the mini-batch in experiences of group_size rows each
        rows_per_experience = group_size
        rows = config.buffer.train_batch_size * rows_per_experience
        if rows % (dp_size * group_size):
            step = dp_size * group_size // math.gcd(dp_size * group_size, rows_per_experience)
            raise ValueError(
                f"Policy loss '{name}' reads each experience as {group_size} consecutive rows, and "
                f"veRL keeps them in one micro-batch, so each GPU's share of a mini-batch must be "
                f"whole groups of {group_size} rows: `buffer.train_batch_size` "
                f"{config.buffer.train_batch_size} gives each of the {dp_size} data-parallel GPUs "
                f"{rows / dp_size:g} rows. Set `buffer.train_batch_size` to a multiple of {step}, "
                f"such as {-(-config.buffer.train_batch_size // step) * step}."
            )
        micro_batch_size = actor.ppo_micro_batch_size_per_gpu
        if not actor.use_dynamic_bsz and micro_batch_size:
            groups = rows // dp_size // group_size
            fitted = group_micro_batch_size(groups, micro_batch_size)
            message = (
                f"Policy loss '{name}' reads each experience as {group_size} rows, so the actor's "
                f"ppo_micro_batch_size_per_gpu counts experiences: each micro-batch holds "
                f"{group_size} times as many rows (and as much activation memory) as it says, "
                "as with verl < 0.8."
            )
            if fitted != micro_batch_size:
                message += (
                    f" Each GPU's {groups} experiences of a mini-batch do not fill micro-batches of "
                    f"{micro_batch_size}: the trainer uses micro-batches of {fitted}."
                )
            self.logger.warning(message)
