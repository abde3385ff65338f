"""KL-Cov's mini-batch selection where verl's engine worker makes it: on each rank's mini-batch, before the split.

Where the tree has ``compute_kl_cov_mask`` (verl 0004), the worker's ``train_batch`` calls it once per mini-batch
with the data-parallel group and puts the mask in the batch (``kl_cov_mask``), which the engine splits with the
rest. `kl_cov_masks` does the same for the ranks that `engine_harness.sim` deals the batch to: at dp 1 in this
process (no group), at dp 2 in two gloo processes (forks of the fork server), so that the function's all-reduce and
all-gather are real collectives. Where the tree lacks it (vanilla), it returns None, and the loss chooses per
micro-batch as upstream does.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import torch

from patchset.plumbing.children import run_children

RANKS_LIMIT_S = 120  # two forks that import verl's core_algos (if the fork server has not) and run two collectives
SELECTION_MODULE = "verl.trainer.ppo.core_algos"


def has_mini_batch_selection() -> bool:
    """Whether the verl tree under test chooses KL-Cov's tokens over the mini-batch (verl 0004)."""
    return hasattr(importlib.import_module(SELECTION_MODULE), "compute_kl_cov_mask")


def _rank_mask(rank: int, world_size: int, workdir: str, kl_cov_ratio: float, module_file: str) -> None:
    """One gloo rank: its rows' mask from the real ``compute_kl_cov_mask`` with the data-parallel group."""
    import verl.trainer.ppo.core_algos as core_algos
    from verl.trainer.ppo.core_algos import compute_kl_cov_mask

    from engine_harness.sim import actor_config

    assert core_algos.__file__ == module_file, f"the rank imported {core_algos.__file__}, not {module_file}"

    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{workdir}/rendezvous", rank=rank, world_size=world_size
    )
    inputs = torch.load(Path(workdir) / f"inputs{rank}.pt")
    config = _config(actor_config, kl_cov_ratio)
    mask = compute_kl_cov_mask(**inputs, config=config, dp_group=torch.distributed.group.WORLD)
    torch.save(mask, Path(workdir) / f"mask{rank}.pt")
    torch.distributed.destroy_process_group()


def _config(actor_config, kl_cov_ratio: float):
    from verl.workers.config import PolicyLossConfig

    return actor_config("token-mean", policy_loss=PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=kl_cov_ratio))


def kl_cov_masks(
    advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor, kl_cov_ratio: float, dp_size: int
) -> torch.Tensor | None:
    """The tokens the worker chooses over the mini-batch whose rows are dealt to ``dp_size`` ranks in contiguous
    blocks (as `engine_harness.sim.engine_gradient` deals them), one mask over all rows; None on a vanilla tree."""
    if not has_mini_batch_selection():
        return None
    inputs = [
        {"advantages": a, "log_prob": lp, "response_mask": m}
        for a, lp, m in zip(
            advantages.chunk(dp_size), log_prob.chunk(dp_size), response_mask.chunk(dp_size), strict=True
        )
    ]
    if dp_size == 1:
        from verl.trainer.ppo.core_algos import compute_kl_cov_mask

        from engine_harness.sim import actor_config

        return compute_kl_cov_mask(**inputs[0], config=_config(actor_config, kl_cov_ratio))
    with tempfile.TemporaryDirectory(prefix="kl-cov-ranks-") as workdir:
        for rank, rank_inputs in enumerate(inputs):
            torch.save(rank_inputs, Path(workdir) / f"inputs{rank}.pt")
        module_file = importlib.import_module(SELECTION_MODULE).__file__
        ranks = [(rank, dp_size, workdir, kl_cov_ratio, module_file) for rank in range(dp_size)]
        codes = run_children(_rank_mask, ranks, RANKS_LIMIT_S, "kl_cov rank", ("torch", SELECTION_MODULE))
        assert not any(codes), f"kl_cov ranks exited with {codes}"
        return torch.cat([torch.load(Path(workdir) / f"mask{rank}.pt") for rank in range(dp_size)])
