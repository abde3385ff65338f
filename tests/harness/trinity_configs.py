"""Trinity's policy losses, DPO configs as a user writes them and the actor loss Trinity installs, as Trinity's own
config validator and trainer complete them, for the regression tests and the overlay cases."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from unittest import mock

from engine_harness.trinity_configs import default_loss_scale_switch

# every loss Trinity-RFT 0.6.0 registers in POLICY_LOSS_FN (a literal, so that collection needs no Trinity tree; the
# test modules that use it check it against the registry of the tree under test)
POLICY_LOSSES = [
    "cispo",
    "dpo",
    "gspo",
    "importance_sampling",
    "mix",
    "mix_chord",
    "opmd",
    "ppo",
    "rec",
    "sapo",
    "sft",
    "sft_is",
    "sft_phi",
    "sppo",
    "topr",
]


# the losses that weight their own micro-batches by the share of expert data (MIX, MIX_CHORD)
MIX_LOSSES = ("mix", "mix_chord")


def policy_loss_fn_args(name: str, loss_agg_mode: str, batch_size: int, dp_size: int, num_expert: int) -> dict:
    """The default args of the registered policy loss ``name``, with ``loss_agg_mode`` where it takes one (Trinity's
    config validator copies the algorithm's mode; a config built in code may not), and for MIX the settings that make
    its own per-micro-batch weights describe the real batch: ``batch_size`` rows over all ``dp_size`` ranks, the last
    ``num_expert`` of them expert data."""
    from trinity.algorithm import POLICY_LOSS_FN

    args = POLICY_LOSS_FN.get(name).default_args()
    if "loss_agg_mode" in args:
        args["loss_agg_mode"] = loss_agg_mode
    if name in MIX_LOSSES:
        usual = {"train_batch_size_usual": batch_size - num_expert, "train_batch_size_expert": num_expert}
        args.update(use_dynamic_bsz=True, ppo_mini_batch_size=batch_size, ngpus_trainer=dp_size, **usual)
    return args


# DPO configs as a user writes them, checked as Trinity checks them (test_trinity_dpo_config.py, the overlay parity)
NESTED = "actor_rollout_ref.actor"
FLAT = "actor"
GPUS = 4


def layout(path: str, **actor) -> dict:
    """``trainer.trainer_config`` with ``actor`` settings at ``path``."""
    return {"actor_rollout_ref": {"actor": actor}} if path == NESTED else {"actor": actor}


def dpo_config(
    model_dir: Path,
    trainer_config,
    train_batch_size: int = 16,
    use_dynamic_bsz: bool | None = None,
    gpus: int = GPUS,
):
    """A DPO training config as a user writes it (Trinity's defaults for everything not given) on one node of ``gpus``
    GPUs. ``model_dir``: an empty folder, where the legacy translation looks for the model's config and moves on (a
    name that is not a folder would be looked up on the Hugging Face Hub, retried for minutes without a network)."""
    from trinity.common.config import Config, ExperienceBufferConfig

    config = Config(mode="train")
    config.algorithm.algorithm_type = "dpo"
    config.buffer.train_batch_size = train_batch_size
    config.buffer.trainer_input.experience_buffer = ExperienceBufferConfig(name="pairs", path="pairs.jsonl")
    config.cluster.node_num, config.cluster.gpu_per_node = 1, gpus
    config.model.model_path = str(model_dir)
    config.model.max_model_len, config.model.max_response_tokens = 64, 32
    config.trainer.save_interval = 10
    if use_dynamic_bsz is not None:
        config.trainer.use_dynamic_bsz = use_dynamic_bsz
    config.trainer.trainer_config = trainer_config
    return config


def check(config) -> list[str]:
    """Run Trinity's validators on ``config`` as ``Config.check_and_update`` does, but for ``BufferConfigValidator``
    (its readers import SQLAlchemy's asyncio support, which needs greenlet, absent from the test environment; it
    checks only the buffer's storage); the warnings they logged."""
    from trinity.common.config_validator import validators

    # they make the job's folders under checkpoint_root_dir, by default the current folder: the checkout
    with tempfile.TemporaryDirectory() as scratch, mock.patch.object(logging.Logger, "warning") as warning:
        config.checkpoint_root_dir = scratch
        for validator in validators:
            if type(validator).__name__ != "BufferConfigValidator":
                validator.validate(config)
    return [str(call.args[0]) for call in warning.call_args_list]


def installed_actor_loss(algo_config, fix_actor_microbatch_loss_scale: bool | None = None, validated: bool = True):
    """The actor loss Trinity installs in its veRL worker: ``VERLTrainer.prepare`` and the worker's real
    ``set_trinity_config``, for a trainer config whose ``trainer.fix_actor_microbatch_loss_scale`` is given, or is
    the veRL trainer's default on the Trinity tree under test (None: `default_loss_scale_switch`).
    Only what those two methods read is stubbed (the worker's engine, the Ray worker group, the checkpoint); a
    tree whose ``set_trinity_config`` does not take the switch (vanilla 0.6.0) gets its loss as it builds it.
    ``validated`` False: the `TrainerConfig` default as it is before Trinity's validator has seen the config."""
    import asyncio
    from types import SimpleNamespace

    from trinity.trainer.verl.trainer import VERLTrainer
    from trinity.trainer.verl.workers import TrinityActorRolloutRefWorker

    if not validated:
        from trinity.common.config import TrainerConfig

        fix_actor_microbatch_loss_scale = TrainerConfig().fix_actor_microbatch_loss_scale
    elif fix_actor_microbatch_loss_scale is None:
        fix_actor_microbatch_loss_scale = default_loss_scale_switch()
    installed = {}
    worker = SimpleNamespace(actor=SimpleNamespace(set_loss_fn=lambda fn: installed.setdefault("loss", fn)))

    def set_trinity_config(**kwargs):
        return TrinityActorRolloutRefWorker.set_trinity_config(worker, **kwargs)

    global_config = SimpleNamespace(
        trainer=SimpleNamespace(fix_actor_microbatch_loss_scale=fix_actor_microbatch_loss_scale),
        explorer=SimpleNamespace(rollout_model=SimpleNamespace(engine_type="vllm")),
        synchronizer=SimpleNamespace(ray_namespace="test"),
    )
    trainer = SimpleNamespace(
        actor_rollout_wg=SimpleNamespace(set_trinity_config=set_trinity_config),
        algorithm_config=algo_config,
        global_config=global_config,
        config=SimpleNamespace(trainer=global_config.trainer),
        _load_checkpoint=lambda: None,
    )
    asyncio.run(VERLTrainer.prepare(trainer))
    return installed["loss"]
