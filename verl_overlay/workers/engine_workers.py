"""Mirror of ``verl.workers.engine_workers`` on verl 0.8.0, and the members common to 0.8.0 and 0.9.1: the engine
worker computes KL-Cov's and Clip-Cov's tokens (patch 0004) and bypass mode's IS mean (patch 0005) over each optimizer
mini-batch, across data-parallel ranks, before the engine splits it.

``TrainingWorkerMembers`` and ``ActorRolloutRefWorkerMembers`` hold the patched members of ``TrainingWorker`` and
``ActorRolloutRefWorker`` (never instantiated; named apart because ``init_model`` builds upstream's
``TrainingWorker``). ``train_batch`` and the new ``_assign_cov_selection_mask``, ``_current_log_probs`` and
``_assign_is_batch_mean`` are the same on both releases; ``train_mini_batch`` (marks the first update of a call:
``old_log_probs_are_current``) and ``init_model`` (tells the actor which statistic its loss needs) are 0.8.0's here
and 0.9.1's in `verl_overlay.workers.engine_workers_v0_9`. On verl 0.7.1 (the verl-0.7 series' 0003 and 0004) only
``_current_log_probs`` and the attributes are these; its other members are in
`verl_overlay.workers.engine_workers_v0_7`, and this module imports there too. The three attributes the patch sets in
``TrainingWorker.__init__`` (whose code differs by release and gains nothing else) are class attributes here, the
same values for every worker until ``init_model`` sets them.

Every method's code replaces that of upstream's function (under verl's ``register`` / ``DistProfiler.annotate``
wrappers, which stay) or is added, bound to upstream's module, so it runs in ``verl.workers.engine_workers``'s
namespace: the globals below are that module's own objects, and those the patch imports there
(``ADDED_GLOBALS``) are added to it.
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
from verl.trainer.ppo.core_algos import compute_clip_cov_mask, compute_kl_cov_mask
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_is_batch_mean
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.device import get_device_id, get_device_name, get_torch_device
from verl.utils.import_utils import import_external_libs
from verl.utils.memory_utils import aggressive_empty_cache
from verl.utils.metric.utils import Metric
from verl.utils.py_functional import append_to_dict
from verl.utils.tensordict_utils import maybe_fix_3d_position_ids
from verl.workers.config import MtpConfig, TrainingWorkerConfig
from verl.workers.engine_workers import TrainingWorker
from verl.workers.rollout.base import get_rollout_class
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

try:  # read by 0.8.0's init_model only
    from verl.trainer.distillation import distillation_ppo_loss
except ImportError:  # verl 0.7.1, which has no distillation: its piece takes engine_workers_v0_7's init_model
    pass

if TYPE_CHECKING:  # the annotations of local variables, never evaluated
    from verl.workers.config import ActorConfig, DistillationConfig, HFModelConfig, RolloutConfig
    from verl.workers.rollout.base import BaseRollout

# what the patch imports into verl.workers.engine_workers, for the installer to add there (a name the release's module
# has already, as get_torch_device on 0.8.0 and 0.9.1, stays as it is)
ADDED_GLOBALS = {
    "compute_clip_cov_mask": compute_clip_cov_mask,
    "compute_kl_cov_mask": compute_kl_cov_mask,
    "compute_rollout_is_batch_mean": compute_rollout_is_batch_mean,
    "get_device_id": get_device_id,
    "get_torch_device": get_torch_device,
    "no_padding_2_padding": no_padding_2_padding,
}
# what the patch sets in TrainingWorker.__init__: class attributes here (TrainingWorkerMembers)
WORKER_DEFAULTS = ("cov_selection_config", "num_cov_selections", "is_batch_norm_config")
# the methods the patch adds to TrainingWorker, and those whose code it replaces, of each class; the installer takes
# each from the release's mirror where that has it (0.9.1: train_mini_batch and init_model; 0.7.1: all but
# _current_log_probs), else from this module
ADDED_METHODS = ("_assign_cov_selection_mask", "_current_log_probs", "_assign_is_batch_mean")
REPLACED_METHODS = {"TrainingWorker": ("train_mini_batch", "train_batch"), "ActorRolloutRefWorker": ("init_model",)}


class TrainingWorkerMembers:
    """The patched members of ``TrainingWorker``; never instantiated."""

    # set to the actor config when its policy loss is kl_cov or clip_cov: see _assign_cov_selection_mask
    cov_selection_config = None
    # mini-batches chosen for so far: Clip-Cov draws afresh for each
    num_cov_selections = 0
    # set to the actor config when bypass mode's REINFORCE loss normalizes its IS weights: see _assign_is_batch_mean
    is_batch_norm_config = None

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
                actor_output = self.train_batch(mini_batch_td)
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

    def train_batch(self, data: TensorDict) -> TensorDict:
        assert self.loss_fn is not None, "loss function can't be None when calling train_batch"
        assert not self.engine_config.forward_only, "Can't run `train_batch` when forward_only is in the engine config."
        # global_token_num should be a list of number of tokens of each seq in this batch
        global_token_num = tu.get(data, key="global_token_num")
        disable_auto_offload = tu.get(data, key="disable_auto_offload", default=False)
        images_seqlens = tu.get(data, key="images_seqlens", default=None)

        # inject engineering parameters if not specified
        default_keys = dict(
            use_remove_padding=self.model_config.get("use_remove_padding", False),
            use_dynamic_bsz=self.engine_config.use_dynamic_bsz,
            max_token_len_per_gpu=self.engine_config.max_token_len_per_gpu,
            micro_batch_size_per_gpu=self.engine_config.micro_batch_size_per_gpu,
            use_fused_kernels=self.engine_config.use_fused_kernels,
        )

        for key, val in default_keys.items():
            if key not in data.keys():
                tu.assign_non_tensor(data, **{key: val})

        with (
            self.engine.train_mode(disable_auto_offload=disable_auto_offload),
            Timer(name="train_batch", logger=None) as timer,
        ):
            if self.cov_selection_config is not None:
                self._assign_cov_selection_mask(data)
            if self.is_batch_norm_config is not None:
                self._assign_is_batch_mean(data)
            output = self.engine.train_batch(data, loss_function=self.loss_fn)
            # containing loss, model_output and metrics
            # for training, we only care about loss and metrics
        delta_time = timer.last

        update_lr_scheduler = tu.get(data, key="update_lr_scheduler", default=False)
        # update lr scheduler
        if update_lr_scheduler:
            lr = self.engine.lr_scheduler_step()
        else:
            lr = None

        if self.engine.is_mp_src_rank_with_outputs():
            # we don't need model_output in training. Maybe we change out mind later
            output.pop("model_output")
            if lr is not None:
                output["metrics"]["lr"] = lr
            final_output = self._postprocess_output(
                output,
                global_token_num=global_token_num,
                delta_time=delta_time,
                forward_only=False,
                images_seqlens=images_seqlens,
            ).cpu()
        else:
            final_output = None

        return final_output

    def _assign_cov_selection_mask(self, data: TensorDict):
        """Choose the tokens KL-Cov penalizes or Clip-Cov clips over the whole mini-batch, across data-parallel ranks,
        before the engine splits it: each micro-batch's loss then applies its rows of one choice
        (data["kl_cov_mask"] / data["clip_cov_mask"]), so the split and the number of ranks do not change the update.
        The choice needs the current policy's log-probs of every token before the first backward pass: old_log_probs
        on the first update of a step (the same parameters computed them), else one no-grad forward over the
        mini-batch with the training micro-batches. Clip-Cov's pick is seeded by the actor's data_loader_seed and the
        number of mini-batches chosen for so far, and keyed by each row's place in the mini-batch over all ranks
        (every rank holds as many rows)."""
        config = self.cov_selection_config
        # the selection's collectives run where the engine's do (NCCL: on the accelerator); the mask goes back to
        # the batch's device, to be split with the rest of its rows
        device = get_device_id() if get_torch_device().is_available() else "cpu"
        fields = data.select("response_mask", "old_log_probs", "advantages").to_padded_tensor()
        if tu.get(data, key="old_log_probs_are_current", default=False):
            log_prob = fields["old_log_probs"]
        else:
            log_prob = self._current_log_probs(data)
        inputs = {
            "advantages": fields["advantages"].to(device),
            "log_prob": log_prob.to(device),
            "response_mask": fields["response_mask"].to(device),
            "config": config,
            "dp_group": self.engine.get_data_parallel_group(),
        }
        if config.policy_loss.loss_mode == "kl_cov":
            data["kl_cov_mask"] = compute_kl_cov_mask(**inputs).to(fields["response_mask"].device)
            return
        num_rows = len(data)
        data["clip_cov_mask"] = compute_clip_cov_mask(
            old_log_prob=fields["old_log_probs"].to(device),
            row_ids=torch.arange(num_rows) + self.engine.get_data_parallel_rank() * num_rows,
            seed=hash((config.data_loader_seed, self.num_cov_selections)),
            **inputs,
        ).to(fields["response_mask"].device)
        self.num_cov_selections += 1

    def _current_log_probs(self, data: TensorDict) -> torch.Tensor:
        """The current policy's log-probs of the mini-batch, shape (batch_size, response_length): one no-grad forward
        with the training micro-batches, and the RNG state restored, so that dropout (if any) draws what training
        will draw."""
        device_name = get_device_name()
        devices = [get_device_id()] if device_name != "cpu" and get_torch_device().is_available() else []
        with torch.random.fork_rng(devices=devices, device_type=device_name):
            output = self.engine.infer_batch(data, loss_function=None)
        return no_padding_2_padding(output["model_output"]["log_probs"], data)

    def _assign_is_batch_mean(self, data: TensorDict):
        """Compute the mean of bypass mode's truncated IS weights over the whole mini-batch, across data-parallel
        ranks, before the engine splits it: each micro-batch's loss then divides its weights by that one mean
        (data["rollout_is_batch_mean"], one copy a row), so the split and the number of ranks do not change the
        update. The weights are the current policy's over the rollout's probabilities (old_log_probs in bypass
        mode), so the mean needs the current log-probs of every token before the first backward pass: one no-grad
        forward over the mini-batch."""
        rollout_corr = self.is_batch_norm_config.policy_loss.rollout_correction
        # the all-reduce runs where the engine's collectives do (NCCL: on the accelerator)
        device = get_device_id() if get_torch_device().is_available() else "cpu"
        fields = data.select("response_mask", "old_log_probs").to_padded_tensor()
        batch_mean = compute_rollout_is_batch_mean(
            log_prob=self._current_log_probs(data).to(device),
            rollout_log_prob=fields["old_log_probs"].to(device),
            response_mask=fields["response_mask"].to(device),
            rollout_is=rollout_corr.get("rollout_is"),
            rollout_is_threshold=rollout_corr.get("rollout_is_threshold", 2.0),
            dp_group=self.engine.get_data_parallel_group(),
        )
        data["rollout_is_batch_mean"] = batch_mean.to(fields["response_mask"].device).expand(len(data))


class ActorRolloutRefWorkerMembers:
    """The patched members of ``ActorRolloutRefWorker``; never instantiated."""

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

            # construct TrainingWorkerConfig
            ref_training_config = TrainingWorkerConfig(
                model_type=ref_config.model_config.get("model_type", "language_model"),
                model_config=ref_config.model_config,
                engine_config=ref_config.engine,
                optimizer_config=ref_config.optim,
                checkpoint_config=ref_config.checkpoint,
            )

            # assign engine configs
            ref_training_config.engine_config.use_dynamic_bsz = self.config.ref.use_dynamic_bsz
            ref_training_config.engine_config.infer_max_token_len_per_gpu = self.config.ref.ppo_max_token_len_per_gpu
            ref_training_config.engine_config.infer_micro_batch_size_per_gpu = (
                self.config.ref.ppo_micro_batch_size_per_gpu
            )
            ref_training_config.engine_config.use_remove_padding = model_config.get("use_remove_padding", False)

            self.ref = TrainingWorker(config=ref_training_config)
            self.ref.reset()
            self.set_dispatch_collect(mesh_name="ref", **self.ref.get_dispatch_collect())

        # 2. build actor model
        if "actor" in self.role:
            actor_config: ActorConfig = omega_conf_to_dataclass(self.config.actor)
            actor_config.model_config = model_config
            distillation_config: DistillationConfig | None = (
                omega_conf_to_dataclass(self.distillation_config) if self.distillation_enabled else None
            )

            actor_training_config = TrainingWorkerConfig(
                model_type=actor_config.model_config.get("model_type", "language_model"),
                model_config=actor_config.model_config,
                engine_config=actor_config.engine,
                optimizer_config=actor_config.optim,
                checkpoint_config=actor_config.checkpoint,
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
            self.actor = TrainingWorker(config=actor_training_config)
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
