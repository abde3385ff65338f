"""Mirror of ``trinity.trainer.verl.trainer``: `VERLTrainer` as patches 0001 and 0010 (`prepare`), 0004 and 0007
(`_update_actor`) leave it.

`_update_actor` (0004: pairs kept whole; 0007: a DPO mini-batch counted in rows) replaces the code of upstream's own
method, so it runs in the upstream module's namespace: every global it reads is the object that module imports
(``POLICY_LOSS_FN`` and the two helpers of ``trinity_overlay/trainer/verl/config.py`` are added to it, as the patch's
imports do). The warning that a fixed micro-batch size counts
pairs is given at configuration time (``trinity_overlay/common/config_validator.py``).
"""

from __future__ import annotations

from trinity.algorithm import POLICY_LOSS_FN
from trinity.trainer.verl.monkey_patch import left_right_2_no_padding
from verl import DataProto
from verl.utils import tensordict_utils as tu
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict

from trinity_overlay.trainer.verl.config import actor_data_parallel_size, group_micro_batch_size

ADDED_GLOBALS = {
    "POLICY_LOSS_FN": POLICY_LOSS_FN,
    "actor_data_parallel_size": actor_data_parallel_size,
    "group_micro_batch_size": group_micro_batch_size,
}
PATCHED_METHODS = ("_update_actor",)  # upstream's own, whose code is replaced
ADDED_METHODS: tuple[str, ...] = ()
# upstream's own, whose code the policy-loss piece replaces (0001: the switch passed to the actor's loss; 0010: an
# unset switch, a config that skipped Trinity's validator, refused; only the switch-default piece leaves it unset)
SWITCH_METHODS = ("prepare",)


class VERLTrainer:
    """The patched members of ``VERLTrainer``; never instantiated itself."""

    async def prepare(self):  # type: ignore[no-untyped-def]
        trainer_config = self.global_config.trainer
        if trainer_config.fix_actor_microbatch_loss_scale is None:
            raise ValueError(
                "`trainer.fix_actor_microbatch_loss_scale` is unset: the config must be "
                "validated first (`Config.check_and_update`)."
            )
        self.actor_rollout_wg.set_trinity_config(
            algo_config=self.algorithm_config,
            rollout_engine_type=self.global_config.explorer.rollout_model.engine_type,
            ray_namespace=self.global_config.synchronizer.ray_namespace,
            fix_actor_microbatch_loss_scale=trainer_config.fix_actor_microbatch_loss_scale,
        )
        self.global_steps = 0
        self._load_checkpoint()

    def _update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        batch_td = batch.to_tensordict()
        batch_td = left_right_2_no_padding(batch_td)
        calculate_entropy = self.algorithm_config.entropy_loss_fn != "none"
        group_size = POLICY_LOSS_FN.get(self.algorithm_config.policy_loss_fn).group_size
        # ppo_mini_batch_size counts experiences (buffer.train_batch_size), and one experience is
        # group_size rows (DPO: chosen, rejected); veRL counts the mini-batch and the global batch
        # size the loss normalizes by in rows
        ppo_mini_batch_size = self.config.actor.ppo_mini_batch_size * group_size
        ppo_epochs = self.config.actor.ppo_epochs
        seed = self.config.actor.data_loader_seed
        shuffle = self.config.actor.shuffle
        tu.assign_non_tensor(
            batch_td,
            calculate_entropy=calculate_entropy,
            global_batch_size=ppo_mini_batch_size,
            mini_batch_size=ppo_mini_batch_size,
            epochs=ppo_epochs,
            seed=seed,
            dataloader_kwargs={"shuffle": shuffle},
            temperature=batch.meta_info.get("temperature", self.global_config.model.temperature),
            compute_loss=True,
        )
        if group_size > 1:
            # veRL cuts micro-batches by token budget and reorders rows by length unless told
            # to keep groups of consecutive rows together (e.g. DPO's chosen/rejected pairs)
            tu.assign_non_tensor(batch_td, force_group_size=group_size)
            actor = self.config.actor
            if not actor.use_dynamic_bsz and actor.ppo_micro_batch_size_per_gpu:
                # veRL then counts the micro-batch in groups and asserts that each GPU's groups
                # fill whole micro-batches: use the largest size that divides them (the
                # configuration check says so)
                dp_size = actor_data_parallel_size(self.global_config, actor)
                micro_batch_size = group_micro_batch_size(
                    ppo_mini_batch_size // dp_size // group_size, actor.ppo_micro_batch_size_per_gpu
                )
                tu.assign_non_tensor(batch_td, micro_batch_size_per_gpu=micro_batch_size)
        actor_output = self.actor_rollout_wg.update_actor(batch_td)
        actor_output = tu.get(actor_output, "metrics")
        actor_output = rename_dict(actor_output, "actor/")
        if "actor/mfu" in actor_output:
            actor_output["perf/mfu/actor"] = actor_output.pop("actor/mfu")
        metrics.update(reduce_metrics(actor_output))
        return batch
