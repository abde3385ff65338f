"""Mirror of ``trinity.trainer.verl.trainer``: `VERLTrainer` as patches 0004 and 0007 leave it.

`__init__` (0007: the start-up warning) and `_update_actor` (0004: pairs kept whole; 0007: a DPO mini-batch counted
in rows) replace the code of upstream's own methods, so they run in the upstream module's namespace: every global they
read is the object that module imports (``POLICY_LOSS_FN`` is added to it, as the patch's import does);
`_warn_if_groups_fill_micro_batches` (0007) is set on the upstream class.
"""

from __future__ import annotations

import sys

import ray
import transformers
from accelerate import init_empty_weights
from omegaconf import DictConfig
from ray.actor import ActorHandle
from trinity.algorithm import ADVANTAGE_FN, ALGORITHM_TYPE, KL_FN, POLICY_LOSS_FN
from trinity.common.config import Config
from trinity.trainer.verl.checkpoint import CheckpointCoordinator
from trinity.trainer.verl.config import build_verl_config
from trinity.trainer.verl.monkey_patch import left_right_2_no_padding
from trinity.trainer.verl.trainer import CheckpointMonitor
from trinity.trainer.verl.workers import TrinityActorRolloutRefWorker, TrinityCriticWorker
from trinity.utils.log import get_logger
from verl import DataProto
from verl.single_controller.ray import ResourcePoolManager
from verl.trainer.ppo.utils import Role
from verl.utils import hf_processor, hf_tokenizer
from verl.utils import tensordict_utils as tu
from verl.utils.fs import copy_to_local
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict

ADDED_GLOBALS = {"POLICY_LOSS_FN": POLICY_LOSS_FN}
PATCHED_METHODS = ("__init__", "_update_actor")  # upstream's own, whose code is replaced
ADDED_METHODS = ("_warn_if_groups_fill_micro_batches",)


class VERLTrainer:
    """The patched and added members of ``VERLTrainer``; never instantiated itself."""

    def __init__(self, global_config: Config):
        self.logger = get_logger(__name__, in_ray_actor=True)
        self.logger.info(f"Initializing verl Trainer with {global_config.trainer.trainer_strategy} backend")
        self.global_config = global_config
        self.config: DictConfig = build_verl_config(global_config)
        # ---------------
        # Algorithm Setup
        # ---------------
        self.algorithm_config = global_config.algorithm
        self.algorithm = ALGORITHM_TYPE.get(self.algorithm_config.algorithm_type)
        self._warn_if_groups_fill_micro_batches()
        if self.algorithm.compute_advantage_in_trainer:
            self.advantage_fn = ADVANTAGE_FN.get(self.algorithm_config.advantage_fn)(
                **self.algorithm_config.advantage_fn_args
            )
            self.kl_fn = KL_FN.get(self.algorithm_config.kl_penalty_fn)(**self.algorithm_config.kl_penalty_fn_args)
        # -------------------------------
        # Workers and Resource Pool Setup
        # -------------------------------
        self.mapping: dict[Role, str] = {}
        self.role_worker_mapping: dict[Role, ActorHandle] = {}

        # Add Actor
        lora_rank = self.config.model.lora_rank
        # if lora is enabled, use ref in actor
        self.ref_in_actor = lora_rank > 0 or self.config.model.lora_adapter_path is not None
        self.use_reference_policy = self.algorithm.use_reference
        self.use_critic = self.algorithm.use_critic
        role = Role.ActorRolloutRef if self.use_reference_policy and not self.ref_in_actor else Role.ActorRollout
        self.role_worker_mapping[role] = ray.remote(TrinityActorRolloutRefWorker)  # type: ignore
        self.mapping[role] = self.GLOBAL_POOL_ID

        # Add Critic
        if self.algorithm.use_critic:
            self.role_worker_mapping[Role.Critic] = ray.remote(TrinityCriticWorker)  # type: ignore
            self.mapping[Role.Critic] = self.GLOBAL_POOL_ID

        # TODO: use a global resource manager for both explorer and trainer
        resource_pool_spec = {
            self.GLOBAL_POOL_ID: [self.global_config.cluster.trainer_gpu_num_per_node]
            * self.global_config.cluster.trainer_node_num
        }
        # Trinity do not need reward / distillation model workers, so we only create one global pool
        # for actor and critic
        self.resource_pool_manager = ResourcePoolManager(
            resource_pool_spec=resource_pool_spec,
            mapping=self.mapping,  # type: ignore
        )

        # ----------------
        # Tokenizer Setup
        # ----------------
        local_path = copy_to_local(
            global_config.model.model_path,
            use_shm=self.config.model.use_shm,
        )
        trust_remote_code = global_config.model.trust_remote_code
        self.tokenizer = hf_tokenizer(local_path, trust_remote_code=trust_remote_code)
        self.processor = hf_processor(local_path, trust_remote_code=trust_remote_code)
        # TODO: remove empty model after dataproto conversion is fixed
        hf_config = transformers.AutoConfig.from_pretrained(local_path, trust_remote_code=trust_remote_code)
        with init_empty_weights():
            self.empty_model = transformers.AutoModel.from_config(hf_config, trust_remote_code=trust_remote_code)
        # Trinity do not need data loader in trainer, so we do not initialize it here

        # Training steps config
        self.total_training_steps = global_config.trainer.total_steps or sys.maxsize
        # we only support cuda for now
        self.device_name = "cuda"
        checkpoint_monitor = CheckpointMonitor.get_actor(
            namespace=global_config.synchronizer.ray_namespace,
            save_strategy=global_config.trainer.save_strategy,
            default_local_dir=self.global_config.checkpoint_job_dir,
            default_hdfs_dir=None,
        )
        self.checkpoint_coordinator = CheckpointCoordinator(checkpoint_monitor)
        self._saved_checkpoint_paths: list[str] = []
        self._init_workers()

    def _warn_if_groups_fill_micro_batches(self) -> None:
        """Say once, at start-up, that a fixed micro-batch size counts experiences, not rows.

        The veRL trainer hands a policy loss with ``group_size`` > 1 (DPO) to the engine with
        ``force_group_size``, and veRL then counts ``ppo_micro_batch_size_per_gpu`` in groups: each
        micro-batch holds ``group_size`` times the rows, and the activation memory, that it says,
        as on the legacy trainer, which doubles DPO's micro-batch size.
        """
        group_size = POLICY_LOSS_FN.get(self.algorithm_config.policy_loss_fn).group_size
        if group_size > 1 and not self.config.actor.use_dynamic_bsz:
            self.logger.warning(
                f"Policy loss '{self.algorithm_config.policy_loss_fn}' reads each experience as "
                f"{group_size} rows, so the actor's ppo_micro_batch_size_per_gpu counts "
                f"experiences: each micro-batch holds {group_size} times as many rows (and as much "
                "activation memory) as it says, as with verl < 0.8."
            )

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
        actor_output = self.actor_rollout_wg.update_actor(batch_td)
        actor_output = tu.get(actor_output, "metrics")
        actor_output = rename_dict(actor_output, "actor/")
        if "actor/mfu" in actor_output:
            actor_output["perf/mfu/actor"] = actor_output.pop("actor/mfu")
        metrics.update(reduce_metrics(actor_output))
        return batch
