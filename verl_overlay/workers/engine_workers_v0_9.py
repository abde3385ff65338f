"""Mirror of ``verl.workers.engine_workers`` on verl 0.9.1: the two patched methods whose code differs from 0.8.0's
(`verl_overlay.workers.engine_workers` has 0.8.0's, and the members common to both releases). ``train_mini_batch``
marks the first update of a call (``old_log_probs_are_current``, patch 0004); ``init_model`` tells the actor which
mini-batch statistic its loss needs (KL-Cov's and Clip-Cov's tokens, 0004; bypass mode's IS mean, 0005).

Each method's code replaces that of upstream's function under verl's ``register`` wrapper, so it runs in
``verl.workers.engine_workers``'s namespace: the globals below are that module's own objects.
"""

from __future__ import annotations

from copy import deepcopy
from functools import partial
from itertools import chain
from typing import TYPE_CHECKING

import torch
from codetiming import Timer
from omegaconf import open_dict
from tensordict import NonTensorData, TensorDict
from torch.distributed.device_mesh import init_device_mesh
from verl.checkpoint_engine import CheckpointEngineRegistry
from verl.trainer.distillation import distillation_ppo_loss
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.device import get_device_name
from verl.utils.import_utils import import_external_libs
from verl.utils.memory_utils import aggressive_empty_cache
from verl.utils.metric.utils import Metric
from verl.utils.py_functional import append_to_dict
from verl.utils.tensordict_utils import maybe_fix_3d_position_ids
from verl.workers.config import MtpConfig, TrainingWorkerConfig
from verl.workers.rollout.base import get_rollout_class
from verl.workers.utils.losses import ppo_loss

if TYPE_CHECKING:  # the annotations of local variables, never evaluated
    from verl.workers.config import ActorConfig, DistillationConfig, HFModelConfig, RolloutConfig
    from verl.workers.rollout.base import BaseRollout


class TrainingWorkerMembers:
    """``TrainingWorker.train_mini_batch`` of verl 0.9.1, patched; never instantiated."""

    def train_mini_batch(self, data: TensorDict) -> TensorDict:
        """Split a batch into N mini-batches run for multiple epochs

        Args:
            data:

        Returns:

        """
        maybe_fix_3d_position_ids(data)
        batch_size_per_dp = data.shape[0]
        disable_auto_offload = tu.pop(data, key="disable_auto_offload", default=False)
        mini_batch_size = tu.pop(data, key="mini_batch_size", default=None)
        num_mini_batch = tu.pop(data, key="num_mini_batch", default=None)
        epochs = tu.pop(data, key="epochs", default=1)
        seed = tu.pop(data, key="seed", default=42)
        dataloader_kwargs = tu.pop(data, key="dataloader_kwargs", default={})

        assert mini_batch_size is not None or num_mini_batch is not None

        if mini_batch_size is None:
            assert batch_size_per_dp % num_mini_batch == 0, f"Got {batch_size_per_dp=} and {num_mini_batch=}"
            mini_batch_size_per_gpu = batch_size_per_dp // num_mini_batch
        else:
            assert mini_batch_size % self.engine.get_data_parallel_size() == 0, (
                f"Got {mini_batch_size=} and {self.engine.get_data_parallel_size()=}"
            )
            mini_batch_size_per_gpu = mini_batch_size // self.engine.get_data_parallel_size()

        # make iterator
        dataloader = tu.make_iterator(
            data,
            mini_batch_size=mini_batch_size_per_gpu,
            epochs=epochs,
            seed=seed + self.engine.get_data_parallel_rank(),
            dataloader_kwargs=dataloader_kwargs,
        )

        with (
            self.engine.train_mode(disable_auto_offload=disable_auto_offload),
            Timer(name="train_batch", logger=None),
        ):
            # update
            output_lst = []
            total_num_iterations = data.shape[0] // mini_batch_size_per_gpu * epochs

            for batch_idx, mini_batch_td in enumerate(dataloader):
                maybe_fix_3d_position_ids(mini_batch_td)
                # add global token num
                if "input_ids" in mini_batch_td:
                    global_token_num = mini_batch_td["input_ids"].offsets().diff().tolist()  # (total_nnz,)
                    # allgather from dp rank
                    global_token_num_output = [None] * torch.distributed.get_world_size(
                        self.engine.get_data_parallel_group()
                    )
                    torch.distributed.all_gather_object(
                        global_token_num_output, global_token_num, self.engine.get_data_parallel_group()
                    )
                    global_token_num = [x for xs in global_token_num_output for x in xs]
                else:
                    global_token_num = None

                tu.assign_non_tensor(
                    mini_batch_td,
                    # no update yet in this call: the policy is the one that computed old_log_probs
                    old_log_probs_are_current=batch_idx == 0,
                    global_token_num=NonTensorData(global_token_num),
                    update_lr_scheduler=batch_idx == total_num_iterations - 1,
                    disable_auto_offload=True,
                )
                # Name the mini-batch in the trace so each iteration of this otherwise identical
                # loop is distinguishable when the whole step is recorded (continuous mode).
                with torch.profiler.record_function(f"mini_batch{batch_idx}"):
                    actor_output = self.train_batch(mini_batch_td)
                # Advance the profiler once per mini-batch. This drives any
                # torch.profiler.schedule (the schedule's unit is one update mini-batch) and,
                # with no schedule, only labels torch's ProfilerStep#<n> boundary. start()/stop()
                # happen on the outer worker, but the profiler is process-global so this reaches it.
                self.profiler.step()
                output_lst.append(actor_output)

            if self.engine.is_mp_src_rank_with_outputs():
                actor_output = [tu.get(output, "metrics") for output in output_lst]
                metrics = {}
                for output in actor_output:
                    for key, val in output.items():
                        # flattn dp and micro batch
                        if isinstance(val, list):
                            output[key] = (
                                Metric.aggregate_dp(val)
                                if isinstance(val[0], Metric)
                                else list(chain.from_iterable(val))
                            )
                    append_to_dict(metrics, output)

                output = tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics}).cpu()
            else:
                output = None
        return output


class ActorRolloutRefWorkerMembers:
    """``ActorRolloutRefWorker.init_model`` of verl 0.9.1, patched; never instantiated."""

    def init_model(self):
        model_config: HFModelConfig = omega_conf_to_dataclass(self.config.model)

        # 1. build reference model
        if "ref" in self.role:
            # TODO: align ref config with actor config
            with open_dict(self.config.ref):
                self.config.ref.ppo_mini_batch_size = self.config.actor.ppo_mini_batch_size
                self.config.ref.ppo_micro_batch_size = self.config.ref.pop("log_prob_micro_batch_size", None)
                self.config.ref.ppo_micro_batch_size_per_gpu = self.config.ref.pop(
                    "log_prob_micro_batch_size_per_gpu", None
                )
                self.config.ref.use_dynamic_bsz = self.config.ref.pop("log_prob_use_dynamic_bsz", False)
                self.config.ref.ppo_max_token_len_per_gpu = self.config.ref.pop("log_prob_max_token_len_per_gpu", None)
            ref_config: ActorConfig = omega_conf_to_dataclass(self.config.ref)

            # The ref model does not need to enable MTP; force it to false.
            ref_config.model_config = deepcopy(model_config)
            ref_config.model_config.mtp = MtpConfig(enable=False)

            # Build the inner ref profiler config via the hydra path (same as the actor / SFT),
            # so its tool_config entries are real dataclass instances the torch profiler can read.
            # This puts the reference model's inner TrainingWorker on par with the actor's, so the
            # torch profiler (and the nsys/npu backends) support the reference model too, instead
            # of the ref silently running with a disabled no-op profiler.
            ref_omega_profiler_config = self.config.ref.get("profiler", {})
            ref_profiler_config = (
                omega_conf_to_dataclass(ref_omega_profiler_config) if ref_omega_profiler_config else None
            )

            # construct TrainingWorkerConfig
            ref_training_config = TrainingWorkerConfig(
                model_type=ref_config.model_config.get("model_type", "language_model"),
                model_config=ref_config.model_config,
                engine_config=ref_config.engine,
                optimizer_config=ref_config.optim,
                checkpoint_config=ref_config.checkpoint,
                profiler_config=ref_profiler_config,
            )

            # assign engine configs
            ref_training_config.engine_config.use_dynamic_bsz = self.config.ref.use_dynamic_bsz
            ref_training_config.engine_config.infer_max_token_len_per_gpu = self.config.ref.ppo_max_token_len_per_gpu
            ref_training_config.engine_config.infer_micro_batch_size_per_gpu = (
                self.config.ref.ppo_micro_batch_size_per_gpu
            )
            ref_training_config.engine_config.use_remove_padding = model_config.get("use_remove_padding", False)

            self.ref = self.ref_worker_cls(config=ref_training_config)
            self.ref.reset()
            self.set_dispatch_collect(mesh_name="ref", **self.ref.get_dispatch_collect())

        # 2. build actor model
        if "actor" in self.role:
            actor_config: ActorConfig = omega_conf_to_dataclass(self.config.actor)
            actor_config.model_config = model_config
            distillation_config: DistillationConfig | None = (
                omega_conf_to_dataclass(self.distillation_config) if self.distillation_enabled else None
            )

            # Build the inner actor profiler config via the hydra path (same as SFT), so
            # its tool_config entries are real dataclass instances the torch profiler can
            # read. This gives the inner TrainingWorker a DistProfiler that shares the
            # process-global torch profiler, so its stages annotate the same trace.
            actor_profiler_config = (
                omega_conf_to_dataclass(self._omega_profiler_config) if self._omega_profiler_config else None
            )

            actor_training_config = TrainingWorkerConfig(
                model_type=actor_config.model_config.get("model_type", "language_model"),
                model_config=actor_config.model_config,
                engine_config=actor_config.engine,
                optimizer_config=actor_config.optim,
                checkpoint_config=actor_config.checkpoint,
                profiler_config=actor_profiler_config,
            )

            assert self.config.actor.use_dynamic_bsz == self.config.rollout.log_prob_use_dynamic_bsz

            # assign engine configs
            actor_training_config.engine_config.use_dynamic_bsz = self.config.actor.use_dynamic_bsz
            actor_training_config.engine_config.infer_max_token_len_per_gpu = (
                self.config.rollout.log_prob_max_token_len_per_gpu
            )
            actor_training_config.engine_config.infer_micro_batch_size_per_gpu = (
                self.config.rollout.log_prob_micro_batch_size_per_gpu
            )
            actor_training_config.engine_config.max_token_len_per_gpu = self.config.actor.ppo_max_token_len_per_gpu
            actor_training_config.engine_config.micro_batch_size_per_gpu = (
                self.config.actor.ppo_micro_batch_size_per_gpu
            )
            actor_training_config.engine_config.use_remove_padding = model_config.get("use_remove_padding", False)

            if self.config.actor.use_dynamic_bsz:
                assert self.config.rollout.log_prob_max_token_len_per_gpu is not None
                assert self.config.actor.ppo_max_token_len_per_gpu is not None
            else:
                assert self.config.rollout.log_prob_micro_batch_size_per_gpu is not None
                assert self.config.actor.ppo_micro_batch_size_per_gpu is not None
            if self.distillation_enabled:
                self.loss_fn = partial(
                    distillation_ppo_loss, config=actor_config, distillation_config=distillation_config
                )
            else:
                self.loss_fn = partial(ppo_loss, config=actor_config)
            self.actor = self.actor_worker_cls(config=actor_training_config)
            self.actor.reset()
            self.actor.set_loss_fn(self.loss_fn)
            self.set_dispatch_collect(mesh_name="actor", **self.actor.get_dispatch_collect())
            # on the FSDP engines (the Megatron engine's forward returns log-probs on the last pipeline stage only)
            chooses_tokens = actor_config.policy_loss.loss_mode in ("kl_cov", "clip_cov")
            if chooses_tokens and actor_config.strategy in ("fsdp", "fsdp2"):
                self.actor.cov_selection_config = actor_config
            # bypass mode's REINFORCE loss with rollout_is_batch_normalize (with ppo_clip the weights only feed
            # metrics), on the FSDP engines as above
            rollout_corr = actor_config.policy_loss.get("rollout_correction", None) or {}
            normalizes_is = (
                actor_config.policy_loss.loss_mode == "bypass_mode"
                and rollout_corr.get("loss_type", "ppo_clip") == "reinforce"
                and rollout_corr.get("rollout_is", None) is not None
                and rollout_corr.get("rollout_is_batch_normalize", False)
            )
            if normalizes_is and actor_config.strategy in ("fsdp", "fsdp2"):
                self.actor.is_batch_norm_config = actor_config

        # 3. build rollout engine
        if "rollout" in self.role:
            rollout_config: RolloutConfig = omega_conf_to_dataclass(self.config.rollout)

            # TODO: move rollout_device_mesh into ServerAdapter
            # 3.1 build rollout device mesh (sglang need only)
            infer_tp = rollout_config.tensor_model_parallel_size * rollout_config.data_parallel_size
            infer_pp = rollout_config.pipeline_model_parallel_size
            infer_world_size = infer_tp * infer_pp
            dp = self.world_size // infer_world_size
            assert self.world_size % infer_world_size == 0, (
                f"rollout world_size: {self.world_size} is not divisible by infer_world_size: {infer_world_size}"
            )
            rollout_device_mesh = init_device_mesh(
                get_device_name(), mesh_shape=(dp, infer_tp, infer_pp), mesh_dim_names=["dp", "infer_tp", "infer_pp"]
            )

            # 3.2 initialize rollout engine
            rollout_cls: type[BaseRollout] = get_rollout_class(rollout_config.name, rollout_config.mode)
            self.rollout = rollout_cls(
                config=rollout_config, model_config=model_config, device_mesh=rollout_device_mesh
            )

            # used for LoRA (base_sync_done is unused in merge-only mode but kept for Phase 2 adapter path)
            self.base_sync_done: bool = "dummy" not in self.config.rollout.load_format
            self.layered_summon = self.config.rollout.get("layered_summon", False)
            self.peft_merge: bool = model_config.lora.get("merge", False)

        # 4. build checkpoint engine
        if "actor" in self.role:
            checkpoint_engine_config = omega_conf_to_dataclass(self.config.rollout.checkpoint_engine)
            backend = checkpoint_engine_config.backend
            bucket_size = checkpoint_engine_config.update_weights_bucket_megabytes << 20
            engine_kwargs = checkpoint_engine_config.engine_kwargs.get(backend, {})
            # If custom_backend_module is set, import it so plugins can register
            # in CheckpointEngineRegistry before the backend is instantiated.
            import_external_libs(checkpoint_engine_config.custom_backend_module or None)
            self.checkpoint_engine = CheckpointEngineRegistry.new(
                backend, is_master=(torch.distributed.get_rank() == 0), bucket_size=bucket_size, **engine_kwargs
            )

        # Free cached GPU memory so colocated vLLM processes can see it via cudaMemGetInfo
        aggressive_empty_cache(force_sync=True)
