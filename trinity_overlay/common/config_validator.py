"""Mirror of ``trinity.common.config_validator``: `PolicyLossGroupValidator` as patches 0004 and 0007 leave it.

A new validator: the installer adds the class to Trinity's module and its instance to Trinity's ``validators`` list,
right after the trainer's own validator, as the patch lists it. Its code reads only its own imports.
"""

from __future__ import annotations

import math

from trinity.common.config import Config
from trinity.common.config_validator import ConfigValidator


class PolicyLossGroupValidator(ConfigValidator):
    """Validator for policy losses that compare consecutive rows, such as DPO's pairs.

    On veRL's engine (verl >= 0.8) the veRL trainer passes such a loss's `group_size` to veRL as
    `force_group_size`, and veRL keeps each group of rows whole in one micro-batch: each GPU's
    share of a mini-batch must then divide into whole groups, and with a fixed micro-batch size
    into micro-batches of `group_size` x `ppo_micro_batch_size_per_gpu` rows. veRL asserts that
    only at the first update. The legacy trainers (verl < 0.8) check their own sizes.
    """

    def validate(self, config: Config) -> None:
        """Check that each GPU gets whole groups, and say how many rows a micro-batch holds.

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

        actor = build_verl_config(config).actor
        if actor.strategy.startswith("megatron"):
            engine = actor.megatron
            model_parallel_size = (
                engine.tensor_model_parallel_size * engine.pipeline_model_parallel_size * engine.context_parallel_size
            )
        else:
            model_parallel_size = actor.ulysses_sequence_parallel_size
        dp_size = max(config.cluster.trainer_gpu_num // model_parallel_size, 1)
        # the veRL trainer counts the mini-batch in experiences of group_size rows each
        rows_per_experience = group_size
        rows = config.buffer.train_batch_size * rows_per_experience
        unit, what = group_size, f"whole groups of {group_size} rows"
        micro_batch_size = actor.ppo_micro_batch_size_per_gpu
        if not actor.use_dynamic_bsz and micro_batch_size:
            unit = group_size * micro_batch_size
            what = (
                f"whole micro-batches of {unit} rows ({group_size} x `ppo_micro_batch_size_per_gpu` {micro_batch_size})"
            )
            self.logger.warning(
                f"Policy loss '{name}' reads each experience as {group_size} rows, so the actor's "
                f"ppo_micro_batch_size_per_gpu counts experiences: each micro-batch holds "
                f"{group_size} times as many rows (and as much activation memory) as it says, "
                "as with verl < 0.8."
            )
        if rows % (dp_size * unit):
            step = dp_size * unit // math.gcd(dp_size * unit, rows_per_experience)
            raise ValueError(
                f"Policy loss '{name}' reads each experience as {group_size} consecutive rows, and "
                f"veRL keeps them in one micro-batch, so each GPU's share of a mini-batch must be "
                f"{what}: `buffer.train_batch_size` {config.buffer.train_batch_size} gives each "
                f"of the {dp_size} data-parallel GPUs {rows / dp_size:g} rows. Set "
                f"`buffer.train_batch_size` to a multiple of {step}."
            )
