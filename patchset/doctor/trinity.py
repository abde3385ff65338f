"""A Trinity-RFT YAML, read as Trinity reads it: its own ``load_config`` and config validators, then the verl config
its veRL trainer builds (``build_verl_config``), from which the split is sized. The cluster comes from the YAML or
``--cluster``: Trinity's validators start Ray to count the GPUs when it is unset, and doctor never starts Ray."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any

from patchset.doctor.compose import one_line
from patchset.plumbing.errors import BadInput, DoesNotCompose


def compose_trinity(path: Path, cluster: tuple[int, int] | None) -> tuple[dict[str, Any], list[str]]:
    """Trinity's validated config as a dict, with the verl actor and critic it trains (``actor_rollout_ref.actor``,
    ``critic``) and their GPUs (``trainer.nnodes``, ``trainer.n_gpus_per_node``); and notes on what could not run.
    Trinity logs to stdout: that goes to stderr here, so that stdout holds only the report."""
    with contextlib.redirect_stdout(sys.stderr):  # importing Trinity logs too
        from omegaconf import OmegaConf
        from trinity.common.config import load_config
        from trinity.common.config_validator import validators
        from trinity.trainer.verl.config import build_verl_config

        try:
            config = load_config(str(path))
        except Exception as error:  # Trinity wraps OmegaConf's errors in a ValueError
            raise DoesNotCompose(one_line(error)) from None
        if cluster is not None:
            config.cluster.node_num, config.cluster.gpu_per_node = cluster
        if not (config.cluster.node_num and config.cluster.gpu_per_node):
            raise BadInput(f"{path} sets no cluster.node_num and cluster.gpu_per_node: give --cluster NODES,GPUS")
        notes = []
        for validator in validators:
            try:
                validator.validate(config)
            except ImportError as error:  # a package of the full install missing here: say so, judge the rest
                notes.append(f"Trinity's {type(validator).__name__} could not run here ({one_line(error)[:120]})")
            except Exception as error:
                raise DoesNotCompose(one_line(error)) from None
        built = OmegaConf.to_container(build_verl_config(config), resolve=True)
        run = dataclasses.asdict(config)
        gpus = config.cluster.trainer_gpu_num or config.cluster.node_num * config.cluster.gpu_per_node
        run["trainer"] |= {"nnodes": 1, "n_gpus_per_node": gpus}
        # Trinity's mini-batch counts experiences (buffer.train_batch_size), not prompts: no x rollout.n
        run["actor_rollout_ref"] = {"actor": built["actor"], "rollout": {"n": 1}}
        run["critic"] = built["critic"]
        run["data"] = {
            "max_prompt_length": config.model.max_prompt_tokens,
            "max_response_length": config.model.max_response_tokens,
        }
        return run, notes
