"""Trinity-RFT's legacy Megatron actor (verl < 0.8): the same weighting and DPO pairs as the FSDP actor.

``tests/regression/megatron_sim.py`` runs ``MegatronPPOActor.update_policy`` and ``forward_backward_batch`` as they
ship, with stand-ins for megatron-core's schedule, parallel state and model forward (listed there): megatron-core
does not run on this CPU machine. Invariant on the patched tree: a mini-batch cut into K micro-batches, fixed or by
token budget, gives the gradient of the uncut one: PPO by Trinity's default token mean, by a normalized token sum
(which Megatron's division by the number of micro-batches shrank by K), and DPO with its default k2 KL term, every
pair whole (``force_group_size``). On the vanilla tree the same measurement deviates.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from legacy_sim import init_single_process_group
from megatron_sim import megatron_gradients

from engine_harness.sim import Split

CASES = [
    ("ppo", "token-mean", Split(2)),
    ("ppo", "token-mean", Split(4)),
    ("ppo", "token-mean", Split(2, dynamic=True)),
    ("ppo", "token-mean", Split(4, dynamic=True)),
    ("ppo", "seq-mean-token-sum-norm", Split(4)),
    ("dpo", "token-mean", Split(4)),
    ("dpo", "token-mean", Split(4, dynamic=True)),
]


@pytest.fixture(scope="module", autouse=True)
def _process_group(trinity_legacy_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    init_single_process_group(tmp_path_factory.mktemp("gloo"))


@pytest.mark.parametrize(("name", "loss_agg_mode", "split"), CASES, ids=lambda value: str(value))
def test_megatron_gradient_independent_of_the_split(expect, name, loss_agg_mode, split):
    (reference,) = megatron_gradients(name, loss_agg_mode, Split(1))
    (gradient,) = megatron_gradients(name, loss_agg_mode, split)
    deviation = float((gradient - reference).norm() / reference.norm())
    ratio = float(gradient.norm() / reference.norm())
    print(f"megatron {name} {loss_agg_mode} {split}: |g_K|/|g_1| {ratio:.4f}, relative error {deviation:.3g}")
    if expect == "fixed":
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)
    else:
        assert deviation > 1e-3, f"vanilla unexpectedly split-invariant ({deviation:.3g})"
