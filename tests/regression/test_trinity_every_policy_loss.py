"""Trinity-RFT actor: every registered policy loss, not only the four aggregation modes of PPO/GRPO.

Invariant on the patched tree: for every loss in Trinity's ``POLICY_LOSS_FN`` registry, with its entropy and
KL terms, the gradient of the summed micro-batch losses through verl's real micro-batch plumbing (fixed size
and token budget, K = 2, 3 and 4, simulated dp 2) equals the one-micro-batch gradient, with the micro-batch
grouping Trinity's own trainer (`VERLTrainer._update_actor`) hands to the engine; or the loss is on
``SPLIT_DEPENDENT`` (its published objective depends on the split) and `TrinityPolicyLoss` says so in a
warning at start-up. DPO pairs stay whole under dynamic batching.

On the vanilla tree the same measurements show the defect for every loss: the gradient changes with the
split, and dynamic batching pairs chosen and rejected rows of different DPO pairs.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
import torch
from harness.sim import engine_gradient, grad_ratio, group_size_sent_by_trainer, record_ratio
from harness.trinity_configs import MIX_LOSSES, POLICY_LOSSES, installed_actor_loss, policy_loss_fn_args

from engine_harness.sim import Split, actor_inputs, use_cpu_unpadding

BATCH_SIZE = 96
NUM_EXPERT = 32  # MIX/MIX_CHORD: rows 64..95 are expert data
SPLITS = [Split(k) for k in (2, 3, 4)] + [Split(k, dynamic=True) for k in (2, 3, 4)]
DP_SPLITS = [(2, Split(2)), (2, Split(2, dynamic=True))]
# losses whose published objective depends on the micro-batch split (their own per-micro-batch weights),
# with the reason the patched TrinityPolicyLoss gives at start-up
SPLIT_DEPENDENT = {"mix": "micro-batch", "mix_chord": "micro-batch"}


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(trinity_tree: Path) -> None:
    use_cpu_unpadding()


def registered_policy_losses() -> list[str]:
    """Every name in Trinity's POLICY_LOSS_FN registry (its default mapping: the losses Trinity ships)."""
    from trinity.algorithm import POLICY_LOSS_FN

    return sorted({*POLICY_LOSS_FN._default_mapping, *POLICY_LOSS_FN.modules})


def test_every_registered_policy_loss_is_tested(expect):
    """Guard, the same on both trees: a loss added to the registry must be added here."""
    assert POLICY_LOSSES == registered_policy_losses()


def policy_loss(
    name: str,
    loss_agg_mode: str = "token-mean",
    dp_size: int = 1,
    entropy: bool = True,
    policy_loss_agg_mode: str | None = None,
):
    """`TrinityPolicyLoss` for the registered loss ``name``, with a k2 KL term and an entropy term aggregated by
    ``loss_agg_mode``; the policy loss aggregates by ``policy_loss_agg_mode`` (default: the same)."""
    from trinity.common.config import AlgorithmConfig

    config = AlgorithmConfig(
        policy_loss_fn=name,
        policy_loss_fn_args=policy_loss_fn_args(
            name, policy_loss_agg_mode or loss_agg_mode, BATCH_SIZE, dp_size, NUM_EXPERT
        ),
        kl_loss_fn="k2",
        kl_loss_fn_args={"kl_coef": 0.05},
        entropy_loss_fn=("mix" if name in MIX_LOSSES else "default") if entropy else "none",
        entropy_loss_fn_args={"entropy_coef": 0.01 if entropy else 0.0},
        loss_agg_mode=loss_agg_mode,
    )
    return installed_actor_loss(config)  # as Trinity installs it, with the tree's default switch


def _import_trinity_trainer():
    from trinity.trainer.verl.trainer import VERLTrainer

    return VERLTrainer


def trainer_group_size(policy_loss_fn: str) -> int:
    """The ``force_group_size`` Trinity's real `VERLTrainer._update_actor` hands to the engine (1: none)."""
    batch, _ = actor_inputs(BATCH_SIZE, seed=0, num_expert=NUM_EXPERT)
    return group_size_sent_by_trainer(_import_trinity_trainer(), policy_loss_fn, batch, "default") or 1


def _gradients(name, split, dp_size=1, loss_agg_mode="token-mean", entropy=True):
    batch, outputs = actor_inputs(BATCH_SIZE, seed=0, num_expert=NUM_EXPERT)
    group_size = trainer_group_size(name)
    reference, _ = engine_gradient(
        policy_loss(name, loss_agg_mode, 1, entropy), batch, outputs, Split(1), force_group_size=group_size
    )
    gradient, _ = engine_gradient(
        policy_loss(name, loss_agg_mode, dp_size, entropy), batch, outputs, split, dp_size, force_group_size=group_size
    )
    return gradient, reference


def _check(expect, name, gradient, reference) -> float:
    ratio = grad_ratio(gradient, reference)
    if expect == "bug" or name in SPLIT_DEPENDENT:
        assert not torch.allclose(gradient, reference, rtol=1e-3), f"{name}: unexpectedly split-invariant"
    else:
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)
    return ratio


@pytest.mark.parametrize("split", SPLITS, ids=str)
@pytest.mark.parametrize("name", POLICY_LOSSES)
def test_every_policy_loss_gradient_invariant_to_micro_batch_count(expect, baseline_dir, name, split):
    gradient, reference = _gradients(name, split)

    ratio = _check(expect, name, gradient, reference)
    record_ratio(baseline_dir, expect, "actor", f"loss {name} token-mean {split}", ratio)


@pytest.mark.parametrize(("dp_size", "split"), DP_SPLITS, ids=str)
@pytest.mark.parametrize("name", POLICY_LOSSES)
def test_every_policy_loss_under_data_parallelism_equals_single_process(expect, baseline_dir, name, dp_size, split):
    gradient, reference = _gradients(name, split, dp_size)

    ratio = _check(expect, name, gradient, reference)
    record_ratio(baseline_dir, expect, "actor", f"loss {name} token-mean dp{dp_size} {split}", ratio)


@pytest.mark.parametrize("split", [Split(4), Split(4, dynamic=True)], ids=str)
def test_policy_term_weighted_apart_from_entropy_and_kl(expect, baseline_dir, split):
    """GSPO aggregating by seq-mean-token-mean (its paper's mode) under a token-mean algorithm: the policy term
    takes its share of sequences, the entropy and KL terms their share of tokens."""
    batch, outputs = actor_inputs(BATCH_SIZE, seed=0, num_expert=NUM_EXPERT)
    loss_fn = policy_loss("gspo", "token-mean", policy_loss_agg_mode="seq-mean-token-mean")

    reference, _ = engine_gradient(loss_fn, batch, outputs, Split(1))
    gradient, _ = engine_gradient(loss_fn, batch, outputs, split)

    ratio = _check(expect, "gspo", gradient, reference)
    record_ratio(baseline_dir, expect, "actor", f"loss gspo(seq-mean-token-mean) token-mean {split}", ratio)


@pytest.mark.parametrize("loss_agg_mode", ["seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("name", MIX_LOSSES)
def test_mix_losses_invariant_with_sequence_mean_modes(expect, baseline_dir, name, loss_agg_mode):
    """MIX/MIX_CHORD weight each micro-batch by its share of usual/expert sequences (their legacy objective):
    with sequence-mean sub-losses and no entropy term (which averages over the micro-batch's usual rows only)
    that is split-invariant on the patched tree."""
    split = Split(4, dynamic=True)
    gradient, reference = _gradients(name, split, loss_agg_mode=loss_agg_mode, entropy=False)

    ratio = grad_ratio(gradient, reference)
    if expect == "fixed":
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)
    else:
        assert not torch.allclose(gradient, reference, rtol=1e-3)
    record_ratio(baseline_dir, expect, "actor", f"loss {name} +kl {loss_agg_mode} {split}", ratio)


@pytest.mark.parametrize("name", sorted(SPLIT_DEPENDENT))
def test_split_dependent_losses_warn_at_start_up(expect, name):
    from trinity.trainer.verl import losses

    with mock.patch.object(losses, "get_logger", create=True) as get_logger:
        policy_loss(name)

    warnings = [call.args[0] for call in get_logger.return_value.warning.call_args_list]
    if expect == "bug":
        assert not warnings, "the vanilla tree warns about nothing"
        return
    assert any(f"`{name}`" in text and SPLIT_DEPENDENT[name] in text for text in warnings), warnings


@pytest.mark.parametrize("name", sorted(set(POLICY_LOSSES) - set(SPLIT_DEPENDENT)))
def test_split_invariant_losses_do_not_warn(expect, name):
    """Guard, the same on both trees: no start-up warning for a loss that is split-invariant."""
    from trinity.trainer.verl import losses

    with mock.patch.object(losses, "get_logger", create=True) as get_logger:
        policy_loss(name)

    assert not get_logger.return_value.warning.called


@pytest.mark.parametrize("split", [Split(2, dynamic=True), Split(4, dynamic=True)], ids=str)
def test_dpo_pairs_stay_whole_under_dynamic_batching(expect, split):
    """Each micro-batch verl makes from Trinity's DPO batch holds whole pairs, chosen row first."""
    from harness.sim import _engine_micro_batches

    batch, _ = actor_inputs(BATCH_SIZE, seed=0, num_expert=NUM_EXPERT)
    micro_batches = _engine_micro_batches(batch, split, {}, force_group_size=trainer_group_size("dpo"))
    rows = [micro_batch["row_id"] for micro_batch in micro_batches]
    paired = all(torch.equal(r[1::2], r[::2] + 1) and bool((r[::2] % 2 == 0).all()) for r in rows)

    if expect == "fixed":
        assert paired, f"pairs split or mismatched: {[r.tolist() for r in rows]}"
    else:
        assert not paired, "vanilla Trinity unexpectedly kept every pair whole"
