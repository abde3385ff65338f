"""verl's real ``ActorRolloutRefWorker.init_model`` on verl's own ``ppo_trainer.yaml`` with the user's overrides
(composed by Hydra as ``main_ppo`` composes it): what the worker asks of the actor's ``TrainingWorker`` for its loss
(verl 0004's mini-batch hook, verl-0.7 0003's). Stand-ins, none on the lines that read the actor config: the
``TrainingWorker`` (no CPU engine), the dispatch registration, the checkpoint engine and the accelerator's cache.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any
from unittest import mock

from engine_harness.model import TINY, ModelShape
from engine_harness.worker_statistics import unasked

# the batch sizes every verl run sets (verl's examples do); init_model checks they are there
REQUIRED = (
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
)
# what a Ray worker group gives each worker's environment: one rank
RANK_ENVIRONMENT = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}


class StubTrainingWorker:
    """What ``init_model`` asks of the actor's ``TrainingWorker``; the attributes the patches set on it for the loss
    start as ``TrainingWorker.__init__`` leaves them: none asked for."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.loss_fn = None
        vars(self).update(unasked())

    def reset(self) -> None:
        pass

    def set_loss_fn(self, loss_fn: Any) -> None:
        self.loss_fn = loss_fn

    def get_dispatch_collect(self) -> dict:
        return {}


def _save_model_config(shape: ModelShape, path: Path) -> None:
    """Only the checkpoint's config (no weights): what verl's ``HFModelConfig`` reads."""
    from transformers import Qwen2Config

    Qwen2Config(**asdict(shape), tie_word_embeddings=False, architectures=["Qwen2ForCausalLM"]).save_pretrained(path)


def compose_trainer_config(verl_tree: Path, overrides: list[str]) -> Any:
    """verl's ``ppo_trainer`` config from the tree's own YAML, with ``overrides`` (Hydra's command-line syntax)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_tree / "verl" / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def init_actor(verl_tree: Path, model_dir: Path, overrides: list[str]) -> StubTrainingWorker:
    """The actor's ``TrainingWorker`` (a `StubTrainingWorker`) as verl's ``init_model`` leaves it, for a run with the
    user's ``overrides``; ``model_dir`` gets a tiny Qwen2 config (no weights: init_model reads only the config)."""
    import verl.workers.engine_workers as engine_workers

    _save_model_config(TINY, model_dir)
    config = compose_trainer_config(verl_tree, [f"actor_rollout_ref.model.path={model_dir}", *REQUIRED, *overrides])
    worker_class = engine_workers.ActorRolloutRefWorker
    with (
        mock.patch.dict(os.environ, RANK_ENVIRONMENT),
        mock.patch.object(engine_workers, "TrainingWorker", StubTrainingWorker),
        # verl 0.9.1 builds the actor from a class attribute, bound to TrainingWorker when the module was imported
        mock.patch.object(worker_class, "actor_worker_cls", StubTrainingWorker, create=True),
        mock.patch.object(worker_class, "set_dispatch_collect", lambda *args, **kwargs: None),
        mock.patch.object(engine_workers.CheckpointEngineRegistry, "new", lambda *args, **kwargs: None),
        mock.patch("torch.distributed.get_rank", lambda *args: 0),
        mock.patch.object(engine_workers, "aggressive_empty_cache", lambda **kwargs: None),
    ):
        worker = worker_class(config.actor_rollout_ref, role="actor")
        inspect.unwrap(worker_class.init_model)(worker)  # without the Ray dispatch wrapper
    return worker.actor
