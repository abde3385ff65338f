"""A run's config, composed as its trainer composes it: a verl launch line with Hydra, from the config folder of the
verl this Python would import (found, not imported: importing verl costs seconds of torch); a Trinity-RFT YAML with
Trinity's own ``load_config`` and validators. Nothing is started: no Ray, no process of the trainer."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import math
import shlex
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.plumbing.errors import BadInput, DoesNotCompose

# verl's Hydra entry points (``@hydra.main(config_path="config", config_name=...)`` in verl/trainer/)
SFT_CONFIG = "sft_trainer_engine"
ENTRY_POINTS = {
    "verl.trainer.main_ppo": "ppo_trainer",
    "verl.trainer.main_ppo_sync": "ppo_trainer",
    "verl.trainer.sft_trainer": SFT_CONFIG,
    "verl.trainer.sft_trainer_ray": SFT_CONFIG,
}
# Hydra's command-line options that take the next word as their value, where it is not given after "="
HYDRA_VALUE_OPTIONS = ("--config-dir", "-cd", "--cfg", "-c", "--package", "-p", "--experimental-rerun")
HYDRA_INFO_OPTIONS = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")  # --info [WHAT]


@dataclass(frozen=True)
class Launch:
    module: str  # the entry point, e.g. verl.trainer.main_ppo
    config_name: str
    config_path: str | None  # --config-path as given (relative: to verl/trainer, as for @hydra.main)
    overrides: tuple[str, ...]
    config_dir: str | None = None  # --config-dir: one more folder on the search path, as given


def read_launch(line: Sequence[str]) -> Launch:
    """The entry point and Hydra arguments of a launch line (``python3 -m verl.trainer.main_ppo k=v ...``, also after
    ``torchrun`` and its options), or that line as one word (a script's "$LAUNCH"); ``BadInput`` when it launches no
    verl trainer."""
    try:
        words = shlex.split(line[0]) if len(line) == 1 else list(line)
    except ValueError as error:  # one word with a quote not closed
        raise BadInput(f"{error}: {line[0][:200]}") from None
    if not words:
        raise BadInput("give the verl launch line after '--', or a Trinity-RFT YAML (see doctor --help)")
    if "-m" in words and words.index("-m") + 1 < len(words):
        start = words.index("-m") + 1
        module = words[start]
    else:
        scripts = [i for i, word in enumerate(words) if word.endswith(".py")]
        if not scripts:
            raise BadInput(f"not a verl launch (no '-m MODULE' and no script): {' '.join(words)[:200]}")
        start = scripts[0]
        module = "verl.trainer." + Path(words[start]).stem
    if module not in ENTRY_POINTS:
        raise BadInput(f"{module}: not a verl trainer entry point doctor knows ({', '.join(ENTRY_POINTS)})")
    config_name, config_path, config_dir, overrides = ENTRY_POINTS[module], None, None, []
    rest = words[start + 1 :]
    while rest:
        word = rest.pop(0)
        name, equals, value = word.partition("=")
        if name in ("--config-name", "-cn", "--config-path", "-cp", *HYDRA_VALUE_OPTIONS) and not equals:
            value = rest.pop(0) if rest else ""
        elif name in ("--info", "-i") and not equals and rest[:1] and rest[0] in HYDRA_INFO_OPTIONS:
            rest.pop(0)
        if name in ("--config-name", "-cn"):
            config_name = value.removesuffix(".yaml")
        elif name in ("--config-path", "-cp"):
            config_path = value
        elif name in ("--config-dir", "-cd"):
            config_dir = value
        elif not word.startswith("-"):
            overrides.append(word)
    return Launch(module, config_name, config_path, tuple(overrides), config_dir)


def package_root(package: str) -> Path:
    """The folder that holds ``package`` as this Python imports it (a checkout, or site-packages)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise BadInput(f"{package} is not importable by this Python: run doctor with the training environment's python")
    return Path(spec.origin).resolve().parent.parent


def compose(launch: Launch, root: Path) -> dict[str, Any]:
    """The launch's config, composed and resolved as the trainer's ``@hydra.main`` would; `DoesNotCompose` else."""
    with training_python():
        from hydra import compose as hydra_compose
        from hydra import initialize_config_dir
        from hydra._internal.hydra import Hydra
        from hydra._internal.utils import create_config_search_path
        from hydra.core.config_search_path import SearchPathQuery
        from hydra.core.global_hydra import GlobalHydra
        from hydra.errors import SearchPathException
        from omegaconf import OmegaConf

    trainer = root / "verl" / "trainer"
    folder = str((trainer / "config" if launch.config_path is None else trainer / launch.config_path).resolve())
    try:
        with initialize_config_dir(config_dir=folder, version_base=None):
            if launch.config_dir is not None:  # before the schema's, as @hydra.main puts it
                extra = Path(launch.config_dir).resolve()
                if not extra.is_dir():
                    raise SearchPathException(f"Additional config directory '{extra}' not found")
                search_path = create_config_search_path(folder)
                search_path.prepend("command-line", f"file://{extra}", SearchPathQuery(provider="schema"))
                GlobalHydra.instance().clear()
                Hydra.create_main_hydra2("app", search_path)
            config = hydra_compose(launch.config_name, overrides=list(launch.overrides))
        return OmegaConf.to_container(config, resolve=True)
    except Exception as error:  # Hydra's and OmegaConf's many error types: the trainer stops on each
        raise DoesNotCompose(one_line(error)) from None


@contextlib.contextmanager
def training_python() -> Iterator[None]:
    """Imports of what the trainer composes its config with: `BadInput` where one is missing, as this Python is then
    not the training environment's (an internal error else)."""
    try:
        yield
    except ImportError as error:
        raise BadInput(f"{one_line(error)}: run doctor with the training environment's python") from None


def one_line(error: Exception) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def get(config: dict[str, Any], key: str, default: Any = None) -> Any:
    """``config``'s value at the dotted ``key``; ``default`` where a part is missing."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def count(config: dict[str, Any], key: str, default: int = 1) -> int:
    """``config``'s size at ``key``; `DoesNotCompose` where it is not a positive number (``key=`` from a launch script's
    unset shell variable, ``null``, 0), as the trainer stops on it."""
    value = get(config, key, default)
    with contextlib.suppress(TypeError, ValueError):
        if int(value) > 0:
            return int(value)
    raise DoesNotCompose(f"{key} is {value!r}, not a positive number")


@dataclass(frozen=True)
class Shape:
    """How one trained model (actor or critic) cuts its mini-batch: per data-parallel rank."""

    strategy: str
    dp: int  # data-parallel ranks
    sp: int  # GPUs sharing one micro-batch (Ulysses sp, or Megatron's tp x pp x cp)
    rows: int  # sequences of one mini-batch on one dp rank
    micro: int | None  # sequences per micro-batch (None: dynamic batching)
    most: int  # the number of micro-batches per mini-batch per rank: exact, or its bound under dynamic batching

    @property
    def dynamic(self) -> bool:
        return self.micro is None


def shape(config: dict[str, Any], model: str) -> Shape:
    """The split of ``model`` ("actor_rollout_ref.actor" or "critic"), worked out as verl 0.8's engine does it."""
    world = count(config, "trainer.nnodes") * count(config, "trainer.n_gpus_per_node")
    strategy = str(get(config, f"{model}.strategy"))
    if strategy == "megatron":
        sp = math.prod(
            int(get(config, f"{model}.megatron.{size}_parallel_size", 1) or 1)
            for size in ("tensor_model", "pipeline_model", "context")
        )
    else:  # Ulysses, where the engine reads it: the actor's fsdp_config (ActorConfig copies the deprecated key there),
        # the critic's fsdp (0.7.x: model.fsdp_config; CriticConfig copies nothing, so its deprecated key is not read)
        engines = ("fsdp.", "model.fsdp_config.") if model == "critic" else ("", "fsdp_config.")
        sp = max(int(get(config, f"{model}.{engine}ulysses_sequence_parallel_size", 1) or 1) for engine in engines)
    dp = max(world // sp, 1)
    mini = count(config, f"{model}.ppo_mini_batch_size") * count(config, "actor_rollout_ref.rollout.n")
    rows = max(mini // dp, 1)
    if get(config, f"{model}.use_dynamic_bsz", False):
        longest = count(config, "data.max_prompt_length") + count(config, "data.max_response_length")
        budget = count(config, f"{model}.ppo_max_token_len_per_gpu") * sp
        return Shape(strategy, dp, sp, rows, None, min(rows, math.ceil(rows * longest / budget)))
    micro = (
        get(config, f"{model}.ppo_micro_batch_size_per_gpu")
        or int(get(config, f"{model}.ppo_micro_batch_size") or 0) // dp
    )
    if not micro:  # verl's ActorConfig and CriticConfig refuse it at start-up
        raise DoesNotCompose(f"{model}: neither ppo_micro_batch_size_per_gpu nor ppo_micro_batch_size is set")
    micro = int(micro)
    return Shape(strategy, dp, sp, rows, micro, max(rows // micro, 1))


def compose_trinity(path: Path, cluster: tuple[int, int] | None) -> tuple[dict[str, Any], list[str]]:
    """Trinity's validated config as a dict, with the verl actor and critic it trains (``actor_rollout_ref.actor``,
    ``critic``: the engine path's or, beside verl < 0.8, the legacy path's), their GPUs (``trainer.nnodes``,
    ``trainer.n_gpus_per_node``) and ``is_verl_legacy``, Trinity's own test; and notes on what could not run.
    The cluster comes from the YAML or ``cluster``: Trinity's validators start Ray to count the GPUs when it is unset.
    Trinity logs to stdout: that goes to stderr here, so that stdout holds only the report."""
    if not path.is_file():
        raise BadInput(f"{path}: no such file")
    with contextlib.redirect_stdout(sys.stderr):  # importing Trinity logs too
        with training_python():
            from omegaconf import OmegaConf
            from trinity.common.config import load_config
            from trinity.common.config_validator import validators
            from trinity.trainer.trainer import is_verl_legacy

        try:
            config = load_config(str(path))
        except Exception as error:  # Trinity wraps OmegaConf's errors in a ValueError
            raise DoesNotCompose(one_line(error)) from None
        if cluster is not None:
            config.cluster.node_num, config.cluster.gpu_per_node = cluster
        if not (config.cluster.node_num and config.cluster.gpu_per_node):
            raise BadInput(f"{path} sets no cluster.node_num and cluster.gpu_per_node: give --cluster NODES,GPUS")
        notes = []
        # the validators make the job's checkpoint, monitor and buffer folders (a new one for a job that has run):
        # doctor only reads, so they go to a folder thrown away, not to the run's checkpoint_root_dir
        with tempfile.TemporaryDirectory(prefix="patchset-doctor-") as scratch:
            config.checkpoint_root_dir = scratch
            for validator in validators:
                try:
                    validator.validate(config)
                except ImportError as error:  # a package of the full install missing here: say so, judge the rest
                    notes.append(f"Trinity's {type(validator).__name__} could not run here ({one_line(error)[:120]})")
                except Exception as error:
                    raise DoesNotCompose(one_line(error)) from None
        legacy = is_verl_legacy()  # verl < 0.8: its validators built the legacy trainer's verl config
        if legacy:
            built = dataclasses.asdict(config.trainer.trainer_config)
            built["actor"] = built["actor_rollout_ref"]["actor"]
        else:
            from trinity.trainer.verl.config import build_verl_config

            built = OmegaConf.to_container(build_verl_config(config), resolve=True)
        run = dataclasses.asdict(config) | {"is_verl_legacy": legacy}
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
