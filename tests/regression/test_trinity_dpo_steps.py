"""One DPO training step is one optimizer step over all its pairs, on verl's engine and on Trinity's legacy path.

Trinity's config translation (`trinity.trainer.verl.config._build_actor_config`, run here as it ships) sets the
actor's ``ppo_mini_batch_size`` to ``buffer.train_batch_size``, which Trinity documents as experiences; a DPO
experience is a pair, sent as two rows. Invariant on the patched tree (the series' DPO-steps patch applied):

- engine: what the real ``VERLTrainer._update_actor`` hands the engine, cut into mini-batches by verl's own
  ``tu.make_iterator`` (as ``train_mini_batch`` does), is one mini-batch holding every pair, and its
  ``global_batch_size`` equals the rows of that mini-batch, so the micro-batch weights (rows / global_batch_size,
  over verl's own micro-batch split) sum to exactly one;
- legacy (verl < 0.8): the real ``update_policy`` makes one optimizer step, with the gradient of the whole batch;
- every other loss keeps upstream's mini-batches.

On the vanilla tree a DPO step is two mini-batches (two optimizer steps) of half the pairs each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from harness.sim import ROLLOUT_FIELDS, sent_by_update_actor

from engine_harness.sim import Split, make_rollout_batch, use_cpu_unpadding

NUM_PAIRS = 24
ROWS = 2 * NUM_PAIRS
OTHER_LOSSES = ["ppo", "sft", "gspo", "mix"]


def translated_actor_config(train_batch_size: int):
    """The actor section Trinity's own config translation builds for ``buffer.train_batch_size``."""
    from omegaconf import OmegaConf
    from trinity.common.config import Config
    from trinity.trainer.verl.config import _build_actor_config

    config = Config()
    config.buffer.train_batch_size = train_batch_size
    return OmegaConf.create(_build_actor_config(config, "fsdp", total_training_steps=10))


def experiences(name: str) -> int:
    """``buffer.train_batch_size`` for a step of ``ROWS`` rows: pairs for DPO, sequences otherwise."""
    return NUM_PAIRS if name == "dpo" else ROWS


def engine_mini_batches(policy_loss_fn: str, train_batch_size: int):
    """The mini-batches verl's ``train_mini_batch`` makes of what Trinity's real ``_update_actor`` sends, the
    ``global_batch_size`` sent with them, and verl's own token-budget micro-batches of each mini-batch."""
    from trinity.trainer.verl.trainer import VERLTrainer
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches

    batch = make_rollout_batch(ROWS, seed=0)
    actor_config = translated_actor_config(train_batch_size)
    batch_td = sent_by_update_actor(
        VERLTrainer, policy_loss_fn, batch, actor_config, fields=(*ROLLOUT_FIELDS, "row_id")
    )
    mini_batch_size = tu.get_non_tensor_data(batch_td, "mini_batch_size", default=None)
    global_batch_size = tu.get_non_tensor_data(batch_td, "global_batch_size", default=None)
    budget = int(batch["attention_mask"].sum()) // 4
    mini_batches, micro_rows = [], []
    for mini_batch in tu.make_iterator(batch_td, mini_batch_size, epochs=1, seed=42, dataloader_kwargs={}):
        mini_batches.append(len(mini_batch))
        tu.assign_non_tensor(mini_batch, use_dynamic_bsz=True, max_token_len_per_gpu=budget)
        micro_batches, _ = prepare_micro_batches(data=mini_batch, dp_group=None, same_micro_num_in_dp=True)
        micro_rows.append([len(micro) for micro in micro_batches])
    return mini_batches, global_batch_size, micro_rows


@pytest.mark.parametrize("name", ["dpo", *OTHER_LOSSES])
def test_engine_step_is_one_mini_batch_whose_weights_sum_to_one(expect, trinity_tree, dpo_steps_patch, name):
    use_cpu_unpadding()
    mini_batches, global_batch_size, micro_rows = engine_mini_batches(name, experiences(name))
    print(f"engine {name}: mini-batches {mini_batches}, global_batch_size {global_batch_size}, micro {micro_rows}")
    for rows in micro_rows:
        # each micro-batch's weight is its rows / global_batch_size (sequences, or pairs: the same share)
        assert sum(rows) == global_batch_size, f"{name}: weights sum to {sum(rows) / global_batch_size}"
    if name == "dpo" and not dpo_steps_patch:
        assert mini_batches == [NUM_PAIRS, NUM_PAIRS], f"upstream's DPO step: two half steps, got {mini_batches}"
    else:
        assert mini_batches == [ROWS]


@pytest.mark.parametrize("name", OTHER_LOSSES)
def test_engine_other_losses_keep_upstream_mini_batches(expect, trinity_tree, name):
    """A train_batch_size of half the batch still gives two mini-batches for every loss but DPO."""
    use_cpu_unpadding()
    mini_batches, global_batch_size, _ = engine_mini_batches(name, ROWS // 2)
    assert mini_batches == [ROWS // 2, ROWS // 2]
    assert global_batch_size == ROWS // 2


@pytest.mark.parametrize("name", ["dpo", "ppo", "sft"])
def test_legacy_step_is_one_optimizer_step(expect, trinity_legacy_tree, dpo_steps_patch, tmp_path: Path, name):
    """The real legacy ``update_policy`` on the actor config Trinity's legacy config translation and worker build
    for ``buffer.train_batch_size`` (24 pairs, or 48 sequences), fixed micro-batches of 12 rows: one optimizer step
    per training step, with the gradient of the whole batch."""
    from legacy_sim import init_single_process_group, legacy_gradients

    init_single_process_group(tmp_path)
    train_batch_size = experiences(name)
    gradients, _ = legacy_gradients(name, "seq-mean-token-mean", Split(4), train_batch_size=train_batch_size)
    print(f"legacy {name}: train_batch_size {train_batch_size}, optimizer steps {len(gradients)}")
    if name == "dpo" and not dpo_steps_patch:
        assert len(gradients) == 2, f"upstream's DPO step: two half steps, got {len(gradients)}"
        return
    assert len(gradients) == 1
    (whole,), _ = legacy_gradients(name, "seq-mean-token-mean", Split(1), train_batch_size=train_batch_size)
    torch.testing.assert_close(gradients[0], whole, rtol=1e-5, atol=1e-7)


# (pairs, micro-batch in pairs): 0007's own Trinity tests accept 7 pairs with a micro-batch of one pair (2 rows)
DPO_SIZES = [(7, 1), (32, 2), (24, 3)]


@pytest.mark.parametrize(("pairs", "micro_pairs"), DPO_SIZES, ids=lambda value: str(value))
def test_legacy_worker_starts_with_every_dpo_size_the_steps_patch_accepts(
    expect, trinity_legacy_tree, dpo_steps_patch, tmp_path: Path, pairs, micro_pairs
):
    """The legacy config translation and the real ``ActorRolloutRefWorker.__init__`` (its per-GPU normalization and
    its start-up assertion that the mini-batch divides into micro-batches) agree with how the steps patch counts
    rows: the mini-batch and the micro-batch both in rows. Upstream counts the mini-batch in pairs and the micro-batch
    in rows (doubled for DPO), so an odd number of pairs per micro-batch stops the worker at start-up."""
    from legacy_sim import init_single_process_group, legacy_actor_config

    init_single_process_group(tmp_path)
    if not dpo_steps_patch and pairs % (2 * micro_pairs) != 0:
        with pytest.raises(AssertionError, match="should be divisible by ppo_micro_batch_size_per_gpu"):
            legacy_actor_config("dpo", pairs, micro_pairs, None)
        return
    config = legacy_actor_config("dpo", pairs, micro_pairs, None)
    rows = 2 * pairs if dpo_steps_patch else pairs
    assert (config.ppo_mini_batch_size, config.ppo_micro_batch_size_per_gpu) == (rows, 2 * micro_pairs)
