"""Trinity-RFT actor: a policy loss that normalizes itself over the global mini-batch is not weighted again.

Trinity-RFT's PR #616 (M2PO; open when read, 2026-12-05) lets a policy loss declare runtime keys
(``_runtime_keys = {"batch_num_tokens", "dp_size"}``, as its M2PO loss does): `TrinityPolicyLoss` hands it the
engine's batch info, and the loss returns its micro-batch's share of the global mini-batch itself. The test registers
such a loss (a PPO-style token mean over the global mini-batch, as M2PO computes it) and runs the whole
`TrinityPolicyLoss` through verl's real micro-batch plumbing (K = 2 and 4 fixed, K = 3 by token budget, simulated
dp 2).

Invariant on the patched tree: the loss receives the engine's ``batch_num_tokens`` and ``dp_size`` on every call,
and the gradient of the summed micro-batch losses equals the one-micro-batch gradient, with the entropy and KL
terms (which keep their own weights) and without them.

On the vanilla tree the loss receives the values too (its ``__call__`` names them, so Trinity 0.6.0 selects them
from the TensorDict) and nothing weights it, so its policy term alone is split-invariant there, as it must stay;
with the entropy and KL terms the gradient grows with the number of micro-batches (the defect the series fixes).
A series that weights the self-normalized policy term a second time fails every case.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from harness.self_normalizing_loss import algorithm_config, registered
from harness.sim import engine_gradient, grad_ratio, record_ratio
from harness.trinity_configs import installed_actor_loss

from engine_harness.sim import Split, actor_inputs, use_cpu_unpadding

BATCH_SIZE = 48
SPLITS = [Split(2), Split(4), Split(3, dynamic=True)]
TERMS = {"pg-only": False, "pg+entropy+kl": True}


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(trinity_tree: Path) -> None:
    use_cpu_unpadding()


@pytest.fixture(scope="module")
def loss_class(trinity_tree: Path) -> Iterator[type]:
    with registered() as cls:
        yield cls


def policy_loss(terms: bool):
    return installed_actor_loss(algorithm_config(terms))  # as Trinity installs it, with the tree's default switch


@pytest.mark.parametrize("terms", TERMS, ids=str)
@pytest.mark.parametrize(("dp_size", "split"), [(1, split) for split in SPLITS] + [(2, Split(2))], ids=str)
def test_self_normalizing_policy_loss_is_not_weighted_again(expect, baseline_dir, loss_class, terms, dp_size, split):
    batch, outputs = actor_inputs(BATCH_SIZE, seed=5)
    loss_fn = policy_loss(TERMS[terms])

    reference, _ = engine_gradient(loss_fn, batch, outputs, Split(1))
    loss_class.received.clear()
    gradient, _ = engine_gradient(loss_fn, batch, outputs, split, dp_size=dp_size)

    # the engine's batch info reached the loss on every call (not its fallback outside the engine)
    expected_info = (int(batch["response_mask"].sum()), dp_size)
    assert loss_class.received and all(
        (int(tokens), int(size)) == expected_info for tokens, size in loss_class.received
    ), loss_class.received
    ratio = grad_ratio(gradient, reference)
    if expect == "fixed" or not TERMS[terms]:
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)
    else:
        assert not torch.allclose(gradient, reference, rtol=1e-3), "vanilla tree unexpectedly split-invariant"
    record_ratio(baseline_dir, expect, "actor", f"self-normalizing {terms} dp{dp_size} {split}", ratio)
