"""Trinity-RFT's legacy FSDP actor under Ulysses sequence parallelism: sp 2 at dp 2 gives the gradient of one process
on the whole mini-batch. (dp 2, four ranks, is where the sp groups and the data-parallel groups are both more than
one rank: every weight dp 1 would check is checked there too, so dp 1 is not run a second time.)

With ``ulysses_sequence_parallel_size`` sp the world is dp x sp, and every rank of an sp group holds its group's rows
(the legacy worker dispatches by the dp rank of its ``ulysses_device_mesh``). Each rank runs the real legacy
``update_policy`` on the remove-padding path, under the worker's own ``ulysses_sharding_manager``: verl's
``ulysses_pad_and_slice_inputs`` gives it a slice of the packed micro-batch, the model's attention gathers the
sequence with verl's all-to-all (``tests/regression/ulysses_model.py``: the attention kernel is plain torch, the one
adaptation), and verl's ``gather_outputs_and_unpad`` gathers the log-probs, its ``Gather.backward`` multiplying the
gradient by sp; FSDP2, sharded over every rank as the worker's device mesh is, averages the gradients over the world.
So sp x the world average is an average over the dp groups, and the weights of the loss must count each dp group
once: the dp factor is the number of dp groups, and the mini-batch's token count counts each row once.

Invariant on the patched tree: with the mini-batch of each dp group cut into K = 2 fixed micro-batches, every
``loss_agg_mode`` of PPO (its entropy and k2 KL terms on) and DPO give the gradient of one process, one micro-batch,
on the whole mini-batch (the same model, no sp group: the all-to-alls are the identity), to fp32 reassociation.
``seq-mean-token-sum-norm`` came out sp times too large with the world size as the dp factor. On the vanilla tree
what its legacy actor gets wrong deviates here as it does without sp (token-mean, seq-mean-token-sum-norm, DPO); its
sequence means were exact, and are checked equal there too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from legacy_sim import (
    BATCH_SIZE,
    RANK_PRELOAD,
    data_parallel_rank,
    init_single_process_group,
    legacy_gradients,
    wrong_on_vanilla,
)

from engine_harness import LOSS_AGG_MODES
from engine_harness.sim import Split
from patchset.plumbing.children import run_children

SP_SIZE = 2
DP_SIZES = (2,)
RANKS_DEADLINE_S = 240
K = 2
CASES = [*(("ppo", mode, K, False) for mode in LOSS_AGG_MODES), ("dpo", "token-mean", K, False)]
BUG_DEVIATION = 1e-3


@pytest.fixture(scope="module")
def sp_gradients(
    request: pytest.FixtureRequest,
    trinity_legacy_tree: Path,
    dpo_steps_patch: bool,
    tmp_path_factory: pytest.TempPathFactory,
):
    """{dp size: {case: the gradient FSDP averaged}}, from dp x sp gloo ranks (children of the fork server,
    `patchset.plumbing.children`), for the dp sizes the session's tests ask for (the teeth run samples one); the
    world sizes run one after the other, each world's ranks at once."""
    gradients = {}
    asked = {item.callspec.params["dp_size"] for item in request.session.items if item.path == request.path}
    for dp_size in sorted(asked):
        world_size, folder = dp_size * SP_SIZE, tmp_path_factory.mktemp(f"dp{dp_size}-sp{SP_SIZE}")
        args = (world_size, str(folder), json.dumps(CASES), dpo_steps_patch, SP_SIZE)
        ranks = [(rank, *args) for rank in range(world_size)]
        codes = run_children(
            data_parallel_rank, ranks, RANKS_DEADLINE_S, f"dp {dp_size} sp {SP_SIZE} rank", RANK_PRELOAD
        )
        assert codes == [0] * world_size, f"dp {dp_size} sp {SP_SIZE}: a rank failed (output above): {codes}"
        gradients[dp_size] = torch.load(folder / "gradients.pt")
    return gradients


@pytest.fixture(scope="module")
def whole_batch(trinity_legacy_tree: Path, dpo_steps_patch: bool, tmp_path_factory: pytest.TempPathFactory):
    """One process, one micro-batch, on the whole mini-batch of every dp group (the same model, sp 1)."""
    init_single_process_group(tmp_path_factory.mktemp("gloo"))

    def gradient(name: str, loss_agg_mode: str, dp_size: int) -> torch.Tensor:
        rows = BATCH_SIZE * dp_size
        steps, _ = legacy_gradients(
            name, loss_agg_mode, Split(1), dpo_mini_batch_in_rows=dpo_steps_patch, rows_per_rank=rows, ulysses_sp=1
        )
        assert len(steps) == 1
        return steps[0]

    return gradient


@pytest.mark.parametrize("dp_size", DP_SIZES, ids=lambda dp: f"dp{dp}-sp{SP_SIZE}")
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0]}-{case[1]}-{Split(case[2], case[3])}")
def test_sequence_parallel_ranks_give_the_gradient_of_the_global_mini_batch(
    expect, sp_gradients, whole_batch, case, dp_size
):
    name, loss_agg_mode, k, dynamic = case
    key = f"{name} {loss_agg_mode} {Split(k, dynamic)}"
    gradient, reference = sp_gradients[dp_size][key], whole_batch(name, loss_agg_mode, dp_size)
    assert isinstance(gradient, torch.Tensor), f"dp {dp_size} sp {SP_SIZE} {key}: {gradient}"
    deviation = float((gradient - reference).norm() / reference.norm())
    ratio = float(gradient.norm() / reference.norm())
    print(f"dp {dp_size} sp {SP_SIZE} {key}: |g|/|g_whole| {ratio:.4f}, error {deviation:.3g}")
    if expect == "bug" and wrong_on_vanilla(name, loss_agg_mode):
        assert deviation > BUG_DEVIATION, f"{key}: vanilla unexpectedly equal to the whole mini-batch ({deviation:.3g})"
    else:
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)
