"""Trinity-RFT on its legacy path: beside verl 0.7.1 it trains through its own worker, not verl's engine.

trinity-rft 0.6.0 accepts verl >= 0.7.1; below verl 0.8 (``is_verl_legacy()``) the actor update is Trinity's
``trinity/trainer/verl_legacy/dp_actor.py`` ``DataParallelPPOActor.update_policy``: it cuts the mini-batch into
micro-batches itself (a fixed ``ppo_micro_batch_size_per_gpu``, or Trinity's token-budget
``rearrange_micro_batches`` with ``use_dynamic_bsz``) and scales each micro-batch loss by its share of rows
(``1 / gradient_accumulation``, or ``rows / ppo_mini_batch_size``). These tests run that loop as it ships, with its
own split, scaling and optimizer step, on a tiny torch language model standing in for the FSDP-wrapped one (one
process, gloo), and record the gradient of every optimizer step.

Invariants on the patched tree, for every loss in Trinity's ``POLICY_LOSS_FN``:

- never worse than vanilla: the gradient of one micro-batch split, relative to the unsplit one, is at least as
  close to 1 as on the vanilla tree (recorded there, compared here);
- where the legacy path promises split invariance (a per-sequence aggregation, which its share-of-rows scaling
  is exact for: algorithm and policy loss by ``seq-mean-token-mean``; DPO's mean over pairs with it) the gradient
  equals the unsplit one;
- DPO pairs are never split: a configuration that would cut a pair (dynamic batching, an odd micro-batch) is
  refused when the algorithm is set, at start-up, with an error that says what to change.

On the vanilla tree DPO feeds the sums over a whole micro-batch into one logit, so its gradient changes with the
split, and dynamic batching matches chosen and rejected rows of different pairs without a word.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from engine_sim import Split, grad_ratio, record_ratio
from legacy_sim import BATCH_SIZE, init_single_process_group, legacy_actor, legacy_gradients
from trinity_configs import POLICY_LOSSES

FIXED_SPLITS = [Split(k) for k in (2, 3, 4)]
DYNAMIC_SPLITS = [Split(k, dynamic=True) for k in (2, 3, 4)]
# dynamic budgets that give this batch micro-batches with an odd number of rows (9, 10, 9, 10, 10 and 7, 6, 8, ...)
ODD_DYNAMIC_SPLITS = [Split(5, dynamic=True), Split(7, dynamic=True)]
LOSS_AGG_MODES = ["seq-mean-token-mean", "token-mean"]
# the legacy path scales each micro-batch by its share of rows, which is exact for a mean over sequences (or over
# DPO pairs, once each pair has its own logit) and for nothing else: token-mean never (unless the experimental
# trainer.fix_actor_microbatch_loss_scale, not tested here), and these losses not even with seq-mean-token-mean:
NOT_PROMISED = {"mix": "own per-micro-batch weights", "mix_chord": "own per-micro-batch weights", "rec": "token-mean"}


@pytest.fixture(scope="module", autouse=True)
def _process_group(trinity_legacy_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    init_single_process_group(tmp_path_factory.mktemp("gloo"))


def one_mini_batch(name: str, dpo_steps_patch: bool) -> int:
    """The ``ppo_mini_batch_size`` (experiences) that makes the whole batch one mini-batch on the tree under test."""
    return BATCH_SIZE // 2 if name == "dpo" and dpo_steps_patch else BATCH_SIZE


def _record_deviation(baseline_dir: Path | None, expect: str, case: str, deviation: float) -> None:
    """Append |gradient - unsplit| / |unsplit| to ``legacy-deviations-<expect>.jsonl`` (no-op without a dir)."""
    if baseline_dir is None:
        return
    baseline_dir.mkdir(parents=True, exist_ok=True)
    with (baseline_dir / f"legacy-deviations-{expect}.jsonl").open("a") as stream:
        stream.write(json.dumps({"case": case, "deviation": deviation}) + "\n")


def _vanilla_deviations(baseline_dir: Path | None) -> dict[str, float]:
    path = None if baseline_dir is None else baseline_dir / "legacy-deviations-bug.jsonl"
    if path is None or not path.exists():
        return {}
    records = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {record["case"]: record["deviation"] for record in records}


def test_every_registered_policy_loss_is_tested(expect):
    from trinity.algorithm import POLICY_LOSS_FN

    assert POLICY_LOSSES == sorted({*POLICY_LOSS_FN._default_mapping, *POLICY_LOSS_FN.modules})


@pytest.mark.parametrize("split", FIXED_SPLITS + DYNAMIC_SPLITS, ids=str)
@pytest.mark.parametrize("loss_agg_mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("name", POLICY_LOSSES)
def test_every_policy_loss_never_worse_than_vanilla_and_split_invariant_where_promised(
    expect, baseline_dir, dpo_steps_patch, name, loss_agg_mode, split
):
    if name == "dpo" and split.dynamic:
        pytest.skip("DPO under dynamic batching: test_dpo_pairs_never_split_under_dynamic_batching")
    mini_batch = one_mini_batch(name, dpo_steps_patch)
    (reference,), _ = legacy_gradients(name, loss_agg_mode, Split(1), mini_batch)
    (gradient,), _ = legacy_gradients(name, loss_agg_mode, split, mini_batch)

    deviation = float((gradient - reference).norm() / reference.norm())
    case = f"loss {name} {loss_agg_mode} {split}"
    record_ratio(baseline_dir, expect, "legacy", case, grad_ratio(gradient, reference))
    _record_deviation(baseline_dir, expect, case, deviation)
    # the entropy and KL terms aggregate by the algorithm's mode too: token-mean is never promised
    promised = loss_agg_mode == "seq-mean-token-mean" and name not in NOT_PROMISED
    if expect == "bug" and name == "dpo":
        assert deviation > 0.1, f"{case}: vanilla DPO unexpectedly split-invariant ({deviation:.3g})"
        return
    vanilla = _vanilla_deviations(baseline_dir).get(case)
    if vanilla is not None:
        assert deviation <= vanilla * (1 + 1e-3) + 1e-6, f"{case}: deviates {deviation:.3g}, vanilla {vanilla:.3g}"
    if promised:
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("split", DYNAMIC_SPLITS + ODD_DYNAMIC_SPLITS, ids=str)
def test_dpo_pairs_never_split_under_dynamic_batching(expect, split):
    """Patched: refused when the worker sets the algorithm (start-up), saying what to change. Vanilla: the legacy
    split regroups rows by length, so chosen and rejected rows of different pairs meet, without a word."""
    if expect == "fixed":
        with pytest.raises(ValueError, match="dynamic batching on verl < 0.8 splits and reorders"):
            legacy_actor("dpo", "token-mean", split)
        return
    gradients, rows = legacy_gradients("dpo", "token-mean", split)
    assert len(gradients) == 1
    whole = all(
        len(micro) % 2 == 0 and all(micro[i] % 2 == 0 and micro[i + 1] == micro[i] + 1 for i in range(0, len(micro), 2))
        for micro in rows
    )
    assert not whole, f"{split}: vanilla kept every pair whole: {rows}"


@pytest.mark.parametrize("micro_batch_rows", [3, 5])
def test_dpo_odd_micro_batch_refused_at_start_up(expect, micro_batch_rows):
    """A fixed micro-batch with an odd number of rows cuts a pair: refused at start-up on the patched tree."""
    from legacy_sim import legacy_actor_config

    assert legacy_actor_config(BATCH_SIZE, micro_batch_rows, None)["ppo_micro_batch_size_per_gpu"] == micro_batch_rows
    split = Split(BATCH_SIZE // micro_batch_rows)  # legacy_actor cuts BATCH_SIZE // K rows
    if expect == "fixed":
        with pytest.raises(ValueError, match=f"ppo_micro_batch_size_per_gpu .* is {micro_batch_rows}"):
            legacy_actor("dpo", "token-mean", split)
    else:
        legacy_actor("dpo", "token-mean", split)  # vanilla accepts it: each micro-batch then sums mixed rows
