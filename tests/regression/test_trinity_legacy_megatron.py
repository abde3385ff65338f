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
from unittest import mock

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


@pytest.mark.parametrize(
    ("backend", "device"), [("gloo", "cpu"), ("nccl", "accelerator"), ("cpu:gloo,cuda:nccl", "accelerator")]
)
def test_token_count_reduced_on_the_device_of_its_groups_backend(expect, backend, device):
    """Megatron's actor moves its mini-batch to the host: the token count goes to the device its group's backend
    reduces on (the accelerator here is ``meta``, which every machine has), not wherever the mini-batch is."""
    if expect == "bug":
        pytest.skip("the vanilla legacy actors all-reduce no token count by default (the weighting patch adds it)")
    from trinity.trainer.verl_legacy import utils

    reduced: list[torch.Tensor] = []
    distributed = utils.torch.distributed
    with (
        mock.patch.object(distributed, "get_backend", return_value=backend),
        mock.patch.object(utils, "get_device_id", return_value="meta"),
        mock.patch.object(distributed, "all_reduce", side_effect=lambda tensor, **_: reduced.append(tensor)),
    ):
        count = utils.mini_batch_token_count(torch.ones(2, 3))
    expected = "cpu" if device == "cpu" else "meta"
    assert [tensor.device.type for tensor in reduced] == [expected] and count.device.type == expected
