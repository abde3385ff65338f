"""Megatron's parallel shapes: each loss weight counts the data parallel groups once, context parallelism included.

Invariant on the patched trees: in each Megatron shape of ``SHAPES`` (data, tensor, pipeline and context parallel
sizes 1 and 2) with K = 1 or 2 fixed micro-batches per rank, the gradient Megatron leaves on every tensor parallel
shard is the gradient of the whole mini-batch's loss on one process, in every ``loss_agg_mode``, for the verl 0.8.0
critic on verl's Megatron engine and for Trinity's legacy Megatron actor (patch 0008). On the vanilla trees the same
measurement deviates at K = 2: the critic in every mode, the legacy actor for the token mean and the
normalized token sum (its division by K is right for the sequence means).

megatron-core does not run a step on this CPU (its schedules, DDP and model forward allocate on CUDA:
docs/evidence/2026-12-05-megatron.md), so ``megatron_shapes.py`` follows each rank of a shape with the rules read in
megatron-core 0.16.1, the release verl 0.8.0's images and Trinity 0.6.0's ``megatron`` extra pin (its docstring
cites each by file and line): the rank layout and groups, the context parallel gather, the schedule's ``x cp /
num_microbatches`` and DDP's ``1 / (dp x cp)``. The losses are the trees' own: verl's ``value_loss`` on micro-batches
cut by verl's ``prepare_micro_batches``, and Trinity's ``aggregate_loss`` weighted by its ``micro_batch_weight``. What
each engine hands its loss, the data parallel size and the token count all-reduced over the data parallel group, is
checked in the trees' sources (``test_..._counts_data_parallel_groups_as_megatron_defines_them``): verl 0.8.0
``verl/workers/engine/megatron/transformer_impl.py`` (``forward_backward_batch``, ``get_data_parallel_size``,
``get_data_parallel_group``; the loss times ``num_micro_batch`` in ``postprocess_micro_batch_func``), Trinity
``trinity/trainer/verl_legacy/megatron_actor.py`` (the 0008 hunk of ``forward_backward_batch``).

The last test shows the measurement can tell a count of context parallel ranks as data parallel ones (what issue 40
found on FSDP with sequence parallelism, ``get_world_size()`` for the dp size): x cp for a token mean and a normalized
token sum.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
import torch
from harness.sim import _engine_micro_batches
from megatron_shapes import MegatronShape, megatron_gradient

from engine_harness import LOSS_AGG_MODES
from engine_harness.sim import Split, critic_model_fields, make_rollout_batch, pack_model_output, use_cpu_unpadding

BATCH_SIZE = 16  # rows of the global mini-batch: dp 2 x K 2 x 4
# data and context parallel alone (the dimensions a count could mistake for one another), together, and with tensor
# and pipeline parallel
SHAPES = [
    MegatronShape(dp=2),
    MegatronShape(cp=2),
    MegatronShape(dp=2, cp=2),
    MegatronShape(dp=2, tp=2, pp=2, cp=2),
]
# fixed splits (the token budget's cut is the same seam, proven on one rank by the other critic and legacy tests)
SPLITS = [Split(1), Split(2)]
# Trinity's legacy Megatron actor, vanilla: Megatron's division by K makes each micro-batch count as its share of rows,
# right for the sequence means with a fixed split; the token mean and the normalized token sum depend on the split
LEGACY_SPLIT_DEPENDENT = ("token-mean", "seq-mean-token-sum-norm")


def _assert_shards(split_dependent: bool, shards: list[torch.Tensor], reference: torch.Tensor) -> None:
    """Every tensor parallel shard gets the reference gradient, or (``split_dependent``) a different one."""
    for shard in shards:
        if split_dependent:
            deviation = float((shard - reference).norm() / reference.norm())
            assert deviation > 1e-3, f"vanilla unexpectedly split-invariant ({deviation:.3g})"
        else:
            torch.testing.assert_close(shard, reference, rtol=1e-5, atol=1e-7)


def _calls(source: Path, function: str, names: set[str]) -> list[ast.Call]:
    """The calls of ``names`` (as attributes: ``x.name(...)``) inside every function ``function`` of ``source``."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    bodies = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == function]
    assert bodies, f"{source}: no function {function}"
    return [
        node
        for body in bodies
        for node in ast.walk(body)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names
    ]


def _group_of_each_all_reduce(source: Path, function: str) -> list[str]:
    calls = _calls(source, function, {"all_reduce"})
    return [ast.unparse(kw.value) for call in calls for kw in call.keywords if kw.arg == "group"]


def _group_of_each_token_count(source: Path, function: str) -> list[str]:
    """The process group each token count of ``function`` is summed over: an ``all_reduce``'s ``group=``, or the group
    it hands to 0008's ``mini_batch_token_count`` (which all-reduces the count over that group, on the device the
    group's backend needs)."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    bodies = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == function]
    counts = [
        node
        for body in bodies
        for node in ast.walk(body)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "mini_batch_token_count"
    ]
    handed = [
        arg for call in counts for arg in (*call.args[1:2], *(k.value for k in call.keywords if k.arg == "group"))
    ]
    return _group_of_each_all_reduce(source, function) + [ast.unparse(arg) for arg in handed]


def _assert_plain_data_parallel_calls(source: Path, function: str) -> int:
    """How many ``mpu.get_data_parallel_group()`` / ``mpu.get_data_parallel_world_size()`` calls ``function`` makes,
    after checking that each asks for Megatron's data parallel group as such (``with_context_parallel=True`` would
    count context parallel ranks as data parallel ones) and that it never asks for the world size."""
    calls = _calls(source, function, {"get_data_parallel_group", "get_data_parallel_world_size", "get_world_size"})
    for call in calls:
        text = ast.unparse(call)
        assert text in ("mpu.get_data_parallel_group()", "mpu.get_data_parallel_world_size()"), (
            f"{source}:{call.lineno}: {text}"
        )
    return len(calls)


# --- verl 0.8.0: the critic on verl's Megatron engine -------------------------------------------------------------


def test_verl_megatron_engine_counts_data_parallel_groups_as_megatron_defines_them(verl_tree: Path):
    source = verl_tree / "verl" / "workers" / "engine" / "megatron" / "transformer_impl.py"
    assert _assert_plain_data_parallel_calls(source, "get_data_parallel_group") == 1
    assert _assert_plain_data_parallel_calls(source, "get_data_parallel_size") == 1
    groups = _group_of_each_all_reduce(source, "forward_backward_batch")  # verl 0.9.1 also counts routed tokens
    assert groups and set(groups) == {"self.get_data_parallel_group()"}, groups
    recorded = {ast.unparse(call) for call in _calls(source, "forward_backward_batch", {"assign_non_tensor"})}
    assert "tu.assign_non_tensor(data, dp_size=self.get_data_parallel_size())" in recorded, recorded
    # the engine hands Megatron each micro-batch loss times the number of micro-batches
    scaled = [
        ast.unparse(call.value)
        for call in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        if isinstance(call, ast.Assign) and ast.unparse(call.targets[0]) == "scaled_loss"
    ]
    assert "loss * data['num_micro_batch']" in scaled, scaled


def _critic_rank_loss(loss_agg_mode: str, batch, split: Split):
    """What one rank of verl's Megatron engine hands Megatron for the critic: ``value_loss`` on each micro-batch of
    verl's own split, times the number of micro-batches (``postprocess_micro_batch_func``)."""
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss

    config = CriticConfig(
        strategy="megatron",
        ppo_micro_batch_size_per_gpu=1,
        cliprange_value=0.2,
        loss_agg_mode=loss_agg_mode,
        **critic_model_fields(),
    )

    def rank_loss(rows: torch.Tensor, seen: torch.Tensor, info: dict) -> list[torch.Tensor]:
        batch_info = {**info, "global_batch_size": len(batch)}
        losses = []
        for micro_batch in _engine_micro_batches(batch[rows], split, batch_info):
            model_output = {"values": pack_model_output(micro_batch, seen[micro_batch["row_id"]])}
            loss, _ = value_loss(config, model_output, micro_batch)
            losses.append(loss * split.num_micro_batches)
        return losses

    return rank_loss


def _critic_inputs():
    batch = make_rollout_batch(BATCH_SIZE, seed=3, extra_fields=("values", "returns"))
    values = batch["values"] + 0.3 * torch.randn(batch["values"].shape, generator=torch.Generator().manual_seed(7))
    return batch, values


@functools.cache
def _critic_reference(loss_agg_mode: str) -> torch.Tensor:
    """The critic's gradient for the whole mini-batch on one process, one micro-batch."""
    batch, values = _critic_inputs()
    rank_loss = _critic_rank_loss(loss_agg_mode, batch, Split(1))
    (reference,) = megatron_gradient(MegatronShape(), values, batch["response_mask"], rank_loss)
    return reference


def _every_shape_split_and_mode(test):
    """The cases of a gradient test: every loss_agg_mode, Megatron shape and split (applied as three stacked
    ``parametrize`` marks would be, so the test ids are theirs)."""
    test = pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)(test)
    test = pytest.mark.parametrize("shape", SHAPES, ids=str)(test)
    return pytest.mark.parametrize("split", SPLITS, ids=str)(test)


def _skip_one_micro_batch_on_vanilla(expect: str, split: Split) -> None:
    if expect == "bug" and split.num_micro_batches == 1:
        pytest.skip("vanilla: the bug needs more than one micro-batch per rank")


@_every_shape_split_and_mode
def test_critic_gradient_under_megatron_shapes_is_the_mini_batch_gradient(
    expect, verl_tree, loss_agg_mode, shape, split
):
    _skip_one_micro_batch_on_vanilla(expect, split)
    use_cpu_unpadding()
    batch, values = _critic_inputs()
    shards = megatron_gradient(shape, values, batch["response_mask"], _critic_rank_loss(loss_agg_mode, batch, split))
    _assert_shards(expect == "bug", shards, _critic_reference(loss_agg_mode))


# --- Trinity 0.6.0 beside verl 0.7.1: its legacy Megatron actor (patch 0008) -------------------------------------


@pytest.fixture(scope="module")
def legacy_weight(trinity_legacy_tree: Path, expect: str):
    """Patch 0008's ``micro_batch_weight``, or None on the vanilla tree (its actor weights nothing)."""
    import trinity.trainer.verl_legacy.utils as utils

    weight = getattr(utils, "micro_batch_weight", None)
    assert (weight is not None) == (expect == "fixed"), f"micro_batch_weight in {utils.__file__}: {weight}"
    return weight


def test_legacy_megatron_actor_counts_data_parallel_groups_as_megatron_defines_them(trinity_legacy_tree, expect):
    source = trinity_legacy_tree / "trinity" / "trainer" / "verl_legacy" / "megatron_actor.py"
    groups = _group_of_each_token_count(source, "forward_backward_batch")
    calls = _assert_plain_data_parallel_calls(source, "forward_backward_batch")
    if expect == "bug":
        assert groups == [], "vanilla counts no tokens"
        return
    assert groups == ["mpu.get_data_parallel_group()"], groups
    sizes = _calls(source, "forward_backward_batch", {"get_data_parallel_world_size"})
    assert len(sizes) == 1 and calls >= 2, [ast.unparse(call) for call in sizes]


def _legacy_rank_loss(weight, loss_agg_mode: str, values_mask: torch.Tensor, num_micro_batches: int):
    """What one rank of Trinity's legacy Megatron actor hands Megatron for one term: the term of each micro-batch of
    its fixed split (rows in order), weighted by ``micro_batch_weight`` times the number of micro-batches (0008), or
    unweighted (vanilla)."""
    from trinity.algorithm.utils import aggregate_loss

    mask = values_mask.bool()

    def rank_loss(rows: torch.Tensor, seen: torch.Tensor, info: dict) -> list[torch.Tensor]:
        tokens = torch.tensor(info["batch_num_tokens"])
        losses = []
        for micro in rows.chunk(num_micro_batches):
            term = aggregate_loss(seen[micro], mask[micro], loss_agg_mode)
            if weight is not None:
                term = term * weight(loss_agg_mode, mask[micro], len(rows), tokens, info["dp_size"])
                term = term * num_micro_batches
            losses.append(term)
        return losses

    return rank_loss


@_every_shape_split_and_mode
def test_legacy_megatron_gradient_under_megatron_shapes_is_the_mini_batch_gradient(
    expect, legacy_weight, loss_agg_mode, shape, split
):
    _skip_one_micro_batch_on_vanilla(expect, split)
    batch = make_rollout_batch(BATCH_SIZE, seed=4, extra_fields=("values",), holes_in_mask=True)
    values, mask = batch["values"], batch["response_mask"]

    one = _legacy_rank_loss(legacy_weight, loss_agg_mode, mask, 1)
    (reference,) = megatron_gradient(MegatronShape(), values, mask, one)
    rank_loss = _legacy_rank_loss(legacy_weight, loss_agg_mode, mask, split.num_micro_batches)
    shards = megatron_gradient(shape, values, mask, rank_loss)
    _assert_shards(expect == "bug" and loss_agg_mode in LEGACY_SPLIT_DEPENDENT, shards, reference)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_counting_context_parallel_ranks_as_data_parallel_is_seen(expect, legacy_weight, loss_agg_mode):
    """The measurement can fail: a dp size that counted the context parallel ranks too (what ``get_world_size()`` or
    ``with_context_parallel=True`` would give), with the token count right, makes a token mean or a normalized token
    sum cp times too large. (0008's weight for the sequence means is a share of the rank's rows, without dp size.)"""
    if legacy_weight is None:
        pytest.skip("vanilla Trinity weights nothing")
    batch = make_rollout_batch(BATCH_SIZE, seed=5, extra_fields=("values",), holes_in_mask=True)
    values, mask = batch["values"], batch["response_mask"]
    shape = MegatronShape(dp=2, cp=2)
    right = _legacy_rank_loss(legacy_weight, loss_agg_mode, mask, 2)

    def counting_cp(rows: torch.Tensor, seen: torch.Tensor, info: dict) -> list[torch.Tensor]:
        return right(rows, seen, {**info, "dp_size": info["dp_size"] * shape.cp})

    one = _legacy_rank_loss(legacy_weight, loss_agg_mode, mask, 1)
    (reference,) = megatron_gradient(MegatronShape(), values, mask, one)
    (wrong,) = megatron_gradient(shape, values, mask, counting_cp)
    torch.testing.assert_close(wrong, reference * shape.cp, rtol=1e-5, atol=1e-7)
