"""Trinity-RFT's legacy actor with two data parallel ranks: the mini-batch is the global one, over both ranks.

Two gloo processes (children of the fork server, `patchset.plumbing.children`) each run the real legacy
``update_policy`` (``tests/regression/legacy_sim.py``: Trinity's legacy config translation and worker for two
trainer GPUs, each rank its half of a 96-row rollout) and average their gradients, as FSDP does. Invariant on the
patched tree: the averaged gradient, with the ranks' mini-batches cut into K = 2 micro-batches or not, fixed or by
token budget, equals the gradient of one process on the whole 96-row mini-batch: the token count of a token mean is
summed over the ranks. Vanilla weighted each rank's token mean alone (and DPO fed whole micro-batches into one
logit), so the same comparison deviates there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from legacy_sim import BATCH_SIZE, RANK_PRELOAD, data_parallel_rank, init_single_process_group, legacy_gradients

from engine_harness.sim import Split
from patchset.plumbing.children import run_children

WORLD_SIZE = 2
RANKS_DEADLINE_S = 240  # both ranks together take about 10 s of CPU
# (policy loss, loss_agg_mode, K, dynamic): PPO by Trinity's default token mean, and DPO with its default k2 KL term
CASES = [
    ("ppo", "token-mean", 1, False),
    ("ppo", "token-mean", 2, False),
    ("ppo", "token-mean", 2, True),
    ("dpo", "token-mean", 1, False),
    ("dpo", "token-mean", 2, True),
]


@pytest.fixture(scope="module")
def rank_gradients(trinity_legacy_tree: Path, dpo_steps_patch: bool, tmp_path_factory: pytest.TempPathFactory):
    """The rank-averaged gradient of every case, from two ranks run at once (each a fork of the fork server, which
    imported torch, verl and Trinity from the trees under test once)."""
    folder = tmp_path_factory.mktemp("dp")
    args = (WORLD_SIZE, str(folder), json.dumps(CASES), dpo_steps_patch)
    ranks = [(rank, *args) for rank in range(WORLD_SIZE)]
    codes = run_children(data_parallel_rank, ranks, RANKS_DEADLINE_S, "data parallel rank", RANK_PRELOAD)
    assert codes == [0] * WORLD_SIZE, f"a data parallel rank failed (its output is above): exit codes {codes}"
    return torch.load(folder / "gradients.pt")


@pytest.fixture(scope="module")
def whole_batch(trinity_legacy_tree: Path, dpo_steps_patch: bool, tmp_path_factory: pytest.TempPathFactory):
    """One process on the whole mini-batch of both ranks, uncut."""
    init_single_process_group(tmp_path_factory.mktemp("gloo"))

    def gradient(name: str) -> torch.Tensor:
        rows = BATCH_SIZE * WORLD_SIZE
        steps, _ = legacy_gradients(
            name, "token-mean", Split(1), dpo_mini_batch_in_rows=dpo_steps_patch, rows_per_rank=rows
        )
        assert len(steps) == 1
        return steps[0]

    return gradient


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0]}-{case[1]}-{Split(case[2], case[3])}")
def test_two_ranks_give_the_gradient_of_the_global_mini_batch(expect, rank_gradients, whole_batch, case):
    name, loss_agg_mode, k, dynamic = case
    key = f"{name} {loss_agg_mode} {Split(k, dynamic)}"
    gradient, reference = rank_gradients[key], whole_batch(name)
    assert isinstance(gradient, torch.Tensor), f"{key}: {gradient}"
    deviation = float((gradient - reference).norm() / reference.norm())
    print(
        f"dp {WORLD_SIZE} {key}: |g|/|g_whole| {float(gradient.norm() / reference.norm()):.4f}, error {deviation:.3g}"
    )
    if expect == "fixed":
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)
    else:
        assert deviation > 1e-3, f"{key}: vanilla unexpectedly equal to the whole mini-batch ({deviation:.3g})"
