"""Trinity-RFT actor: the engine's micro-batch split must not change the `TrinityPolicyLoss` gradient.

Invariant on the patched tree: for PPO- and GRPO-style algorithm configs, every ``loss_agg_mode``, with
and without the entropy and KL terms, the gradient of the summed micro-batch losses is the same for
K = 1, 2, 3, 4, 8 micro-batches (fixed size and by token budget) and under simulated data parallelism
as for one micro-batch on one rank. DPO's policy term is weighted by its share of pairs (every other
registered policy loss: test_trinity_every_policy_loss). The loss is built as Trinity installs it, with the
tree's default ``trainer.fix_actor_microbatch_loss_scale`` (this patchset's carried default: on; upstream's: off).
With the switch on, a micro-batch without the engine's batch info is an error naming the missing key; with it off
the loss is returned as upstream returns it. The logged metrics equal vanilla's.

On the vanilla tree the same measurements show the defect: the gradient grows with the number of
micro-batches per rank (``seq-mean-token-sum-norm`` is a plain sum there, so it is right on one rank and
short by the data-parallel size on several).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from harness.sim import engine_gradient, grad_ratio, record_ratio
from harness.trinity_configs import installed_actor_loss

from engine_harness import LOSS_AGG_MODES
from engine_harness.sim import Split, actor_inputs, pack_model_output, use_cpu_unpadding
from engine_harness.trinity_configs import algorithm_config

ALGORITHMS = ["ppo", "grpo"]
BATCH_SIZE = 96
SPLITS = [Split(k) for k in (2, 3, 4, 8)] + [Split(k, dynamic=True) for k in (2, 4)]
DP_SPLITS = [(dp, Split(k)) for dp in (2, 4) for k in (1, 2, 4)]
BUG_RATIO_TOLERANCE = 0.15
TERMS = {"pg-only": {"kl": False, "entropy": False}, "pg+entropy+kl": {"kl": True, "entropy": True}}


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(trinity_tree: Path) -> None:
    use_cpu_unpadding()


def policy_loss(config):
    """The actor loss as Trinity installs it, with the tree's default ``fix_actor_microbatch_loss_scale``."""
    return installed_actor_loss(config)


def expected_bug_ratio(loss_agg_mode: str, dp_size: int, micro_batches_per_rank: int) -> float:
    """Gradient norm vanilla Trinity gives relative to one micro-batch on one rank."""
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return 1.0 / dp_size
    return float(micro_batches_per_rank)


def check(expect, gradient, reference, loss_agg_mode, dp_size, split) -> float:
    ratio = grad_ratio(gradient, reference)
    if expect == "fixed":
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)
        return ratio
    bug_ratio = expected_bug_ratio(loss_agg_mode, dp_size, split.num_micro_batches)
    assert ratio == pytest.approx(bug_ratio, rel=BUG_RATIO_TOLERANCE), f"ratio {ratio:.3f}, expected ~{bug_ratio}"
    if bug_ratio != 1.0:
        assert not torch.allclose(gradient, reference, rtol=1e-3), "vanilla tree unexpectedly invariant"
    return ratio


@pytest.mark.parametrize("terms", TERMS, ids=str)
@pytest.mark.parametrize("algorithm_type", ALGORITHMS)
@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("split", SPLITS, ids=str)
def test_actor_gradient_invariant_to_micro_batch_count(
    expect, baseline_dir, algorithm_type, loss_agg_mode, terms, split
):
    batch, outputs = actor_inputs(BATCH_SIZE, seed=0)
    loss_fn = policy_loss(algorithm_config(algorithm_type, loss_agg_mode, **TERMS[terms]))

    reference, _ = engine_gradient(loss_fn, batch, outputs, Split(1))
    gradient, _ = engine_gradient(loss_fn, batch, outputs, split)

    ratio = check(expect, gradient, reference, loss_agg_mode, 1, split)
    record_ratio(baseline_dir, expect, "actor", f"{algorithm_type} {terms} {loss_agg_mode} {split}", ratio)


@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
@pytest.mark.parametrize(("dp_size", "split"), DP_SPLITS, ids=str)
def test_actor_gradient_under_data_parallelism_equals_single_process(
    expect, baseline_dir, loss_agg_mode, dp_size, split
):
    batch, outputs = actor_inputs(BATCH_SIZE, seed=1)
    loss_fn = policy_loss(algorithm_config("grpo", loss_agg_mode))

    reference, _ = engine_gradient(loss_fn, batch, outputs, Split(1))
    gradient, _ = engine_gradient(loss_fn, batch, outputs, split, dp_size=dp_size)

    ratio = check(expect, gradient, reference, loss_agg_mode, dp_size, split)
    record_ratio(baseline_dir, expect, "actor", f"grpo pg+entropy+kl {loss_agg_mode} dp{dp_size} {split}", ratio)


def _single_call(loss_fn, batch, outputs, rows: slice, **batch_info):
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    micro_batch = left_right_2_no_padding(batch[rows].clone())
    if batch_info:
        tu.assign_non_tensor(micro_batch, **batch_info)
    model_output = {name: pack_model_output(micro_batch, tensor[rows]) for name, tensor in outputs.items()}
    return loss_fn(model_output, micro_batch)


def test_dpo_loss_weighted_by_pair_share(expect):
    """DPO's policy term takes its share of pairs (= its share of rows); its KL and entropy terms, which take
    their token share, are left out here (test_trinity_every_policy_loss covers them)."""
    batch, outputs = actor_inputs(BATCH_SIZE, seed=2)
    loss_fn = policy_loss(algorithm_config("dpo", "token-mean", kl=False, entropy=False))

    loss, metrics = _single_call(
        loss_fn, batch, outputs, slice(0, 8), dp_size=2, batch_num_tokens=500, global_batch_size=32
    )

    share = 8 / 32 * 2
    if expect == "fixed":
        assert loss.item() == pytest.approx(metrics["final_loss"] * share, rel=1e-6)
    else:
        assert loss.item() == pytest.approx(metrics["final_loss"], rel=1e-6)
        assert loss.item() != pytest.approx(metrics["final_loss"] * share, rel=1e-3)


@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
def test_loss_without_engine_batch_info_is_unscaled_with_the_switch_off(expect, loss_agg_mode):
    """Guard, the same on both trees: with ``fix_actor_microbatch_loss_scale`` off (upstream's default), a loss
    called outside the engine is returned as it is."""
    batch, outputs = actor_inputs(BATCH_SIZE, seed=3)
    loss_fn = installed_actor_loss(algorithm_config("grpo", loss_agg_mode), False)

    loss, metrics = _single_call(loss_fn, batch, outputs, slice(0, 12))

    assert loss.item() == pytest.approx(metrics["final_loss"], rel=1e-6)


@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
def test_switch_on_reads_the_engine_batch_info_strictly(expect, loss_agg_mode):
    """With ``fix_actor_microbatch_loss_scale`` on, a micro-batch without the engine's batch info is an error that
    names the missing key (each key the weight needs is removed in turn); vanilla's engine path never reads the
    switch, and returns the loss as it is."""
    batch, outputs = actor_inputs(BATCH_SIZE, seed=3)
    loss_fn = installed_actor_loss(algorithm_config("grpo", loss_agg_mode), True)
    batch_info = {"dp_size": 1, "batch_num_tokens": 500, "global_batch_size": 32}
    needed = {"token-mean": "batch_num_tokens", "seq-mean-token-sum-norm": None}.get(loss_agg_mode, "global_batch_size")

    for missing in ("dp_size", needed):
        if missing is None:
            continue
        present = {key: value for key, value in batch_info.items() if key != missing}
        if expect == "fixed":
            with pytest.raises(KeyError, match=f"`{missing}`"):
                _single_call(loss_fn, batch, outputs, slice(0, 12), **present)
        else:
            loss, metrics = _single_call(loss_fn, batch, outputs, slice(0, 12), **present)
            assert loss.item() == pytest.approx(metrics["final_loss"], rel=1e-6)


@pytest.mark.vanilla_baseline
@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
def test_metrics_equal_vanilla_metrics(expect, baseline_dir, loss_agg_mode):
    """The vanilla run records its metrics; the patched run must log exactly the same ones."""
    batch, outputs = actor_inputs(BATCH_SIZE, seed=4)
    loss_fn = policy_loss(algorithm_config("grpo", loss_agg_mode))
    _, metrics = engine_gradient(loss_fn, batch, outputs, Split(3))
    assert metrics and all("final_loss" in m for m in metrics)

    if baseline_dir is None:
        pytest.skip("no vanilla baseline to compare with (PATCHSET_BASELINE_DIR unset)")
    baseline_file = baseline_dir / f"actor-metrics-{loss_agg_mode}.json"
    if expect == "bug":
        baseline_dir.mkdir(parents=True, exist_ok=True)
        baseline_file.write_text(json.dumps(metrics))
        return
    if not baseline_file.exists():
        pytest.skip(f"vanilla run did not record {baseline_file.name}")
    vanilla = json.loads(baseline_file.read_text())
    assert len(metrics) == len(vanilla)
    for patched_metrics, vanilla_metrics in zip(metrics, vanilla, strict=True):
        assert patched_metrics == pytest.approx(vanilla_metrics, rel=1e-6, abs=1e-9)
