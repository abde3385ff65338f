"""Trinity-RFT's legacy actor update (verl < 0.8) as it ships, on CPU, for the regression tests.

Runs ``trinity/trainer/verl_legacy/dp_actor.py`` ``DataParallelPPOActor.update_policy`` with its own micro-batch
split, weighting and optimizer step, on the actor config Trinity's legacy path builds: its config translation
(``veRLConfig.synchronize_config`` on a Trinity ``Config``), then the real ``ActorRolloutRefWorker.__init__`` of
``verl_legacy/fsdp_workers.py`` (its per-GPU normalization and start-up checks, and its swap of verl's
``rearrange_micro_batches`` for Trinity's). What is emulated: a tiny torch language model stands in for the
FSDP-wrapped one (the fields ``init_model`` would set from the model are set here, and ``vllm``, which the worker
module imports only for an environment variable, is an empty module when absent); an optimizer with lr 0 records
the gradient of every optimizer step; with several ranks (gloo processes), that optimizer averages the gradients
over the ranks first, as FSDP's reduce-scatter does. With Ulysses sequence parallelism (``LegacyCase.ulysses_sp``) the
actor takes its remove-padding path instead, on `ulysses_model.UlyssesTinyLM` sharded by FSDP2 itself, under the
worker's own ``ulysses_sharding_manager``.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime
import functools
import io
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from ulysses_model import FSDPRecordingOptimizer, UlyssesTinyLM, sharded

from engine_harness.adapt import unpad_helpers
from engine_harness.sim import PROMPT_LEN, RESPONSE_LEN, Split, make_rollout_batch
from engine_harness.trinity_configs import default_loss_scale_switch

# what the fork server imports once for the data-parallel ranks (`data_parallel_rank`); last `legacy_rank_warmup`:
# Trinity's legacy worker and actor, which log as a Ray actor, after naming the logger as each rank does
RANK_PRELOAD = ("torch", "transformers", "legacy_sim", "verl", "legacy_rank_warmup")
RANK_LOGGER = "patchset-regression"

BATCH_SIZE = 48  # rows: 24 DPO pairs (rows 2i, 2i+1)
NUM_EXPERT = 16  # MIX/MIX_CHORD: the last rows are expert data
VOCAB, HIDDEN = 64, 8
# the fields the legacy worker's init_model sets in the actor config from the model (not built here)
MODEL_FIELDS = {"use_remove_padding": False, "use_fused_kernels": False, "use_torch_compile": False}


@dataclass(frozen=True)
class Terms:
    """Which terms the algorithm adds to the policy loss: Trinity's k2 KL and its default entropy term."""

    entropy: bool = True
    kl: bool = True

    def __str__(self) -> str:
        return f"entropy-{'on' if self.entropy else 'off'}-kl-{'on' if self.kl else 'off'}"


ALL_TERMS = Terms()


def init_process_group(folder: Path, rank: int = 0, world_size: int = 1) -> None:
    """gloo: the legacy actor and worker ask torch.distributed for ranks and all-reduce token counts."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = f"file://{folder / 'store'}"
        # a collective waiting for a rank that is gone fails after the timeout instead of waiting forever
        timeout = datetime.timedelta(seconds=120)
        dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world_size, timeout=timeout)


def init_single_process_group(folder: Path) -> None:
    init_process_group(folder)


class TinyLM(torch.nn.Module):
    """Stands in for the causal LM: logits from the token alone, so every row's log-probs are its own."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.embed = torch.nn.Parameter(torch.randn(VOCAB, HIDDEN, generator=generator))
        self.head = torch.nn.Parameter(torch.randn(HIDDEN, VOCAB, generator=generator) / HIDDEN**0.5)

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, **_):
        return SimpleNamespace(logits=torch.tanh(self.embed[input_ids]) @ self.head)


class RecordingOptimizer(torch.optim.SGD):
    """lr 0: records the gradient at every optimizer step (averaged over the ranks, as FSDP does) and never moves
    the weights."""

    def __init__(self, params) -> None:
        super().__init__(params, lr=0.0)
        self.gradients: list[torch.Tensor] = []

    def step(self, closure=None):
        import torch.distributed as dist

        grads = [p.grad.flatten() for group in self.param_groups for p in group["params"] if p.grad is not None]
        gradient = torch.cat(grads).clone()
        if dist.get_world_size() > 1:
            dist.all_reduce(gradient)
            gradient /= dist.get_world_size()
        self.gradients.append(gradient)


def worker_module():
    if "vllm" not in sys.modules:
        try:
            import vllm  # noqa: F401
        except ImportError:  # fsdp_workers imports it only to set NCCL_CUMEM_ENABLE
            sys.modules["vllm"] = types.ModuleType("vllm")
    from trinity.trainer.verl_legacy import fsdp_workers

    return fsdp_workers


def trinity_config(
    policy_loss: str,
    train_batch_size: int,
    budget: int | None,
    loss_scale_flag: bool | None = None,
    sp_size: int = 1,
):
    """A Trinity ``Config`` for one trainer GPU per rank: ``buffer.train_batch_size`` experiences, dynamic
    batching with a token ``budget`` or a fixed micro-batch size (None), Ulysses sequence parallelism ``sp_size``."""
    import torch.distributed as dist
    from trinity.common.config import Config

    config = Config(mode="train")
    config.algorithm.algorithm_type = "dpo" if policy_loss == "dpo" else "grpo"
    # the policy loss Trinity's algorithm validator sets before the trainer's config translation reads it
    config.algorithm.policy_loss_fn = policy_loss
    config.buffer.train_batch_size = train_batch_size
    config.cluster.trainer_gpu_num = config.cluster.trainer_gpu_num_per_node = dist.get_world_size()
    config.trainer.trainer_strategy = "fsdp"
    config.trainer.ulysses_sequence_parallel_size = sp_size
    config.trainer.grad_clip = 1.0e9  # the recorded gradient is the unclipped one
    config.trainer.use_dynamic_bsz = budget is not None
    # None: the veRL trainer's default on the tree (upstream's False, this patchset's True), as its validator sets it
    config.trainer.fix_actor_microbatch_loss_scale = (
        default_loss_scale_switch() if loss_scale_flag is None else loss_scale_flag
    )
    config.trainer.max_token_len_per_gpu = budget if budget is not None else 16384
    config.model.max_model_len = PROMPT_LEN + RESPONSE_LEN
    return config


def legacy_actor_config(
    policy_loss: str,
    train_batch_size: int,
    micro_batch_size: int | None,
    budget: int | None,
    loss_scale_flag: bool | None = None,
    ulysses_sp: int = 0,
):
    """The actor config of Trinity's legacy path: ``synchronize_config``, then the real worker's ``__init__``
    (which divides the mini- and micro-batch sizes per GPU, asserts they divide, and raises on what it refuses).
    ``ulysses_sp``: 0 for the padded forward, else the remove-padding forward with that sequence parallel size.
    Built once per setting (the actor only reads it)."""
    settings = (policy_loss == "dpo", train_batch_size, micro_batch_size, budget, loss_scale_flag, ulysses_sp)
    return _legacy_worker(*settings).config.actor


@functools.cache
def _legacy_worker(
    dpo: bool,
    train_batch_size: int,
    micro_batch_size: int | None,
    budget: int | None,
    loss_scale_flag: bool | None,
    ulysses_sp: int = 0,
):
    """The legacy ``ActorRolloutRefWorker`` built for this setting; its actor config completed as ``init_model``
    would complete it."""
    import torch.distributed as dist
    from omegaconf import OmegaConf, open_dict
    from trinity.trainer.verl_legacy.verl_config import veRLConfig

    config = trinity_config("dpo" if dpo else "ppo", train_batch_size, budget, loss_scale_flag, max(ulysses_sp, 1))
    verl_config = veRLConfig()
    micro = micro_batch_size
    if micro is not None:  # trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
        verl_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu = micro
    with contextlib.redirect_stdout(io.StringIO()):
        verl_config.synchronize_config(config)
    worker_config = OmegaConf.structured(verl_config.actor_rollout_ref)
    rank = dist.get_rank()
    env = {"WORLD_SIZE": str(dist.get_world_size()), "RANK": str(rank), "LOCAL_RANK": str(rank)}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}  # read by verl's Worker, unused: gloo is up
    saved_env = {key: os.environ.get(key) for key in env}
    saved_print = builtins.print  # the worker sends print to its logger
    os.environ.update(env)
    try:
        worker = worker_module().ActorRolloutRefWorker(worker_config, role="actor")
    finally:
        builtins.print = saved_print
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    actor_config = worker.config.actor
    with open_dict(actor_config):
        actor_config.update(MODEL_FIELDS | {"use_remove_padding": ulysses_sp > 0})
        actor_config.fsdp_config.dtype = "float32"
    return worker


def algorithm(name: str, loss_agg_mode: str, split: Split, terms: Terms = ALL_TERMS, mini_batch: int = BATCH_SIZE):
    """Trinity's AlgorithmConfig for policy loss ``name`` with k2 KL and an entropy term, all by ``loss_agg_mode``."""
    from trinity.algorithm import POLICY_LOSS_FN
    from trinity.common.config import AlgorithmConfig

    args = POLICY_LOSS_FN.get(name).default_args()
    if "loss_agg_mode" in args:
        args["loss_agg_mode"] = loss_agg_mode
    if name in ("mix", "mix_chord"):
        args.update(
            use_dynamic_bsz=split.dynamic,
            ppo_mini_batch_size=mini_batch,
            ppo_micro_batch_size_per_gpu=mini_batch // split.num_micro_batches,
            ngpus_trainer=1,
            train_batch_size_usual=mini_batch - NUM_EXPERT,
            train_batch_size_expert=NUM_EXPERT,
        )
    entropy = "mix" if name in ("mix", "mix_chord") else "default"
    return AlgorithmConfig(
        policy_loss_fn=name,
        policy_loss_fn_args=args,
        kl_loss_fn="k2" if terms.kl else "none",
        kl_loss_fn_args={"kl_coef": 0.05} if terms.kl else {},
        entropy_loss_fn=entropy if terms.entropy else "none",
        entropy_loss_fn_args={"entropy_coef": 0.01 if terms.entropy else 0.0},
        loss_agg_mode=loss_agg_mode,
    )


def rollout(seed: int = 0, rows: int = BATCH_SIZE):
    """A rollout batch as Trinity's legacy trainer hands it over, rows 2i and 2i+1 forming DPO pair i."""
    from verl import DataProto

    batch = make_rollout_batch(
        rows, seed=seed, extra_fields=("old_log_probs", "ref_log_prob", "advantages"), holes_in_mask=True
    )
    batch["input_ids"] = batch["input_ids"] % VOCAB
    batch["responses"] = batch["input_ids"][:, PROMPT_LEN:]
    batch["prompts"] = batch["input_ids"][:, :PROMPT_LEN]
    batch["old_log_probs"] = -batch["old_log_probs"].abs() - 3.0
    batch["ref_log_prob"] = -batch["ref_log_prob"].abs() - 3.0
    batch["expert_mask"] = torch.arange(rows) >= rows - NUM_EXPERT
    batch["step"] = torch.full((rows,), 3)
    tensors = {key: batch[key] for key in batch.keys()}
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def rank_rollout(rows_per_rank: int = BATCH_SIZE, seed: int = 0, sp_size: int = 1):
    """This rank's share of the rollout: the trainer chunks it over the data parallel ranks; with Ulysses sequence
    parallelism every rank of an sp group gets its group's chunk (the legacy worker dispatches by the dp rank of its
    ``ulysses_device_mesh``, (dp, sp) row-major: rank // sp)."""
    import torch.distributed as dist

    dp_size = dist.get_world_size() // sp_size
    data = rollout(seed, rows=rows_per_rank * dp_size)
    return data.chunk(dp_size)[dist.get_rank() // sp_size]


def wrong_on_vanilla(name: str, loss_agg_mode: str) -> bool:
    """What the vanilla legacy actor gets wrong: a token mean (REC's always), a normalized token sum, and DPO."""
    return name in ("dpo", "rec") or loss_agg_mode in ("token-mean", "seq-mean-token-sum-norm")


def experiences(name: str, rows: int) -> int:
    """``buffer.train_batch_size`` for a mini-batch of ``rows`` rows: pairs for DPO, sequences otherwise."""
    return rows // 2 if name == "dpo" else rows


@dataclass(frozen=True)
class LegacyCase:
    """One ``update_policy`` call of Trinity's legacy actor. ``split`` cuts this rank's batch into that many
    micro-batches: a fixed micro-batch of ``1 / K`` of the rank's rows, or a token budget of ``1 / K`` of its tokens.
    ``train_batch_size`` (experiences, all ranks) defaults to the whole batch; ``dpo_mini_batch_in_rows`` says whether
    the tree's config translation counts a DPO mini-batch in rows (the DPO-steps patch), for the default.
    ``ulysses_sp``: 0, the padded forward of `TinyLM`; else the remove-padding forward of `UlyssesTinyLM`, sharded by
    FSDP2 over every rank, with that Ulysses sequence parallel size (``rows_per_rank`` then counts the rows of a data
    parallel group)."""

    name: str
    loss_agg_mode: str
    split: Split
    train_batch_size: int | None = None
    terms: Terms = ALL_TERMS
    dpo_mini_batch_in_rows: bool = True
    rows_per_rank: int = BATCH_SIZE
    loss_scale_flag: bool | None = None  # None: the tree's default
    ulysses_sp: int = 0


def legacy_actor(case: LegacyCase):
    """Trinity's legacy ``DataParallelPPOActor``, with its algorithm set as the worker sets it at start-up (where
    a configuration the actor refuses raises)."""
    from trinity.trainer.verl_legacy.dp_actor import DataParallelPPOActor

    name, split = case.name, case.split
    worker = legacy_worker(case)
    config = worker.config.actor
    if case.ulysses_sp:
        unpad_helpers()  # the remove-padding forward: verl's pure-torch unpad helpers without flash_attn
        model = sharded(UlyssesTinyLM(), worker.device_mesh)
        optimizer: torch.optim.Optimizer = FSDPRecordingOptimizer(model.parameters())
    else:
        model = TinyLM()
        optimizer = RecordingOptimizer(model.parameters())
    with contextlib.redirect_stdout(io.StringIO()):  # verl prints its settings on rank 0
        actor = DataParallelPPOActor(config, model, optimizer)
    actor.set_algorithm(algorithm(name, case.loss_agg_mode, split, case.terms, config.ppo_mini_batch_size))
    return actor, optimizer


def legacy_worker(case: LegacyCase):
    """The legacy worker of ``case``'s setting: its split as a token budget or a fixed micro-batch size."""
    import torch.distributed as dist

    name, split, sp_size = case.name, case.split, max(case.ulysses_sp, 1)
    train_batch_size = case.train_batch_size
    if train_batch_size is None:
        total_rows = case.rows_per_rank * dist.get_world_size() // sp_size
        train_batch_size = experiences(name, total_rows) if case.dpo_mini_batch_in_rows else total_rows
    settings = (case.loss_scale_flag, case.ulysses_sp)
    if split.dynamic:
        assert sp_size == 1, "a token budget under sequence parallelism is not emulated here"
        total_tokens = int(rank_rollout(case.rows_per_rank).batch["attention_mask"].sum())
        budget = max(-(-total_tokens // split.num_micro_batches), PROMPT_LEN + RESPONSE_LEN)
        return _legacy_worker(name == "dpo", train_batch_size, None, budget, *settings)
    micro_rows = experiences(name, case.rows_per_rank // split.num_micro_batches)
    return _legacy_worker(name == "dpo", train_batch_size, micro_rows, None, *settings)


def legacy_gradients(name: str, loss_agg_mode: str, split: Split, **options: Any):
    """The gradient of every optimizer step of one ``update_policy`` call, and the rows of each dynamic
    micro-batch (in the rank's batch); ``options``: the rest of `LegacyCase`."""
    return _case_gradients(LegacyCase(name, loss_agg_mode, split, **options))


@functools.cache
def _case_gradients(case: LegacyCase):
    import torch.distributed as dist
    from verl.utils import seqlen_balancing

    actor, optimizer = legacy_actor(case)
    worker, sp_size = legacy_worker(case), max(case.ulysses_sp, 1)
    if worker.ulysses_device_mesh is not None:  # rank_rollout's dispatch is the worker's
        assert worker.ulysses_device_mesh["dp"].get_local_rank() == dist.get_rank() // sp_size
    seen_rows: list[list[int]] = []
    original = seqlen_balancing.rearrange_micro_batches  # Trinity's, which the worker installed
    offset = [0]  # update_policy drops row_id, but keeps the rows in order: mini-batches are contiguous slices

    def recording(batch, *args, **kwargs):
        micro_batches, partitions = original(batch, *args, **kwargs)
        seen_rows.extend([[offset[0] + int(i) for i in partition] for partition in partitions])
        offset[0] += len(batch)
        return micro_batches, partitions

    seqlen_balancing.rearrange_micro_batches = recording
    try:
        with worker.ulysses_sharding_manager:  # verl's sp group for its Ulysses functions, as update_actor does
            actor.update_policy(rank_rollout(case.rows_per_rank, sp_size=sp_size))
    finally:
        seqlen_balancing.rearrange_micro_batches = original
    return optimizer.gradients, seen_rows


def data_parallel_rank(
    rank: int, world_size: int, folder: str, cases: str, dpo_mini_batch_in_rows: bool, ulysses_sp: int = 0
) -> None:
    """One rank (its own process): run ``cases`` (JSON: [name, loss_agg_mode, K, dynamic]) and, on rank 0, save the
    rank-averaged gradient of each to ``folder``/gradients.pt; ``ulysses_sp``: see `LegacyCase`."""
    import json

    from trinity.utils.log import get_logger

    get_logger(RANK_LOGGER, in_ray_actor=True)  # Trinity's legacy modules log as a Ray actor
    init_process_group(Path(folder), rank, world_size)
    gradients: dict[str, torch.Tensor | str] = {}
    for name, loss_agg_mode, k, dynamic in json.loads(cases):
        key = f"{name} {loss_agg_mode} {Split(k, dynamic)}"
        try:
            steps, _ = legacy_gradients(
                name,
                loss_agg_mode,
                Split(k, dynamic),
                dpo_mini_batch_in_rows=dpo_mini_batch_in_rows,
                ulysses_sp=ulysses_sp,
            )
        except Exception as error:  # the same on every rank: a start-up refusal; the test reports it
            gradients[key] = f"{type(error).__name__}: {error}"
            continue
        gradients[key] = steps[0] if len(steps) == 1 else f"{len(steps)} optimizer steps"
    if rank == 0:
        torch.save(gradients, Path(folder) / "gradients.pt")
