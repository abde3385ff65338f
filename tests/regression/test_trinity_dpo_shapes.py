"""DPO as users configure it: ``cluster.gpu_per_node`` / ``buffer.train_batch_size`` / ``ppo_micro_batch_size_per_gpu``.

Each shape goes through Trinity's own validators and config translation (``harness.trinity_configs.check``),
with Trinity's defaults for the rest but ``use_dynamic_bsz: false`` (Trinity's DPO example's setting, where the
micro-batch size counts), in both layouts of ``trainer.trainer_config`` where the path reads both (verl's engine; the
legacy translation reads ``actor_rollout_ref.actor`` only). Invariants on the patched tree (the whole series):

- accepted, with micro-batches of at most 2 pairs, whole pairs: 1/1/2, 2/2/2, 4/32/2, 8/8/2 and 8/64/2 (Trinity's
  documented example). On verl's engine: verl's own ``prepare_micro_batches`` on one GPU's mini-batch of what
  Trinity's real ``VERLTrainer._update_actor`` sends. On the legacy path: the sizes the translation gives pass the
  legacy worker's start-up rule (its share of a mini-batch a multiple of its micro-batch, per GPU, in rows);
- refused at configuration time, naming ``buffer.train_batch_size`` and a value that works: 8/4/2 and 4/6/2 (a GPU
  would get part of a pair).

A refusal's value is checked by checking the config again with it. Without the DPO-steps patch (0007) a mini-batch
holds ``buffer.train_batch_size`` rows: 1/1/2, 2/2/2 and 8/8/2 give each GPU one row, part of a pair, and are refused
at configuration time too. On the vanilla tree the engine accepts every shape at
configuration time, and verl's fixed split asserts at the first update where a GPU's rows are not whole
micro-batches; the legacy worker refuses 1/1/2, 2/2/2 and 8/8/2 at start-up.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from harness.sim import ROLLOUT_FIELDS, sent_by_update_actor
from harness.trinity_configs import FLAT, NESTED, check, dpo_config, layout

from engine_harness.sim import make_rollout_batch, use_cpu_unpadding

# (gpus, buffer.train_batch_size, ppo_micro_batch_size_per_gpu)
SHAPES = [(1, 1, 2), (2, 2, 2), (4, 32, 2), (8, 8, 2), (8, 64, 2), (8, 4, 2), (4, 6, 2)]
MAX_MICRO_ROWS = 4  # 2 pairs


def shape_id(shape: tuple[int, int, int]) -> str:
    return "/".join(map(str, shape))


def rows_per_gpu(shape: tuple[int, int, int], dpo_steps_patch: bool) -> float:
    """The rows of a mini-batch on each GPU: the DPO-steps patch counts a mini-batch in pairs, two rows each."""
    gpus, pairs, _ = shape
    return pairs * (2 if dpo_steps_patch else 1) / gpus


def cuts_a_pair(shape: tuple[int, int, int], dpo_steps_patch: bool) -> bool:
    return rows_per_gpu(shape, dpo_steps_patch) % 2 != 0


def refused_naming_a_value_that_works(config, shape: tuple[int, int, int], path: str, tmp_path: Path) -> int:
    """The configuration check refuses ``config``, naming ``buffer.train_batch_size`` and a value, which it accepts."""
    gpus, _, micro = shape
    with pytest.raises(ValueError, match=r"`buffer\.train_batch_size`") as refusal:
        check(config)
    value = int(re.search(r"such as (\d+)\.", str(refusal.value)).group(1))
    check(dpo_config(tmp_path, layout(path, ppo_micro_batch_size_per_gpu=micro), value, False, gpus))
    return value


def engine_micro_batches(config, gpus: int) -> list[list[int]]:
    """The rows of each micro-batch verl's fixed split makes of GPU 0's first mini-batch of what Trinity's real
    ``_update_actor`` sends (verl's dispatch gives GPU 0 the first rows; the engine's defaults filled in as its
    ``train_batch`` does)."""
    from trinity.trainer.verl.config import build_verl_config
    from trinity.trainer.verl.trainer import VERLTrainer
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.utils import prepare_micro_batches

    actor = build_verl_config(config).actor
    rows = 2 * config.buffer.train_batch_size
    batch = make_rollout_batch(rows, seed=0)
    fields = (*ROLLOUT_FIELDS, "row_id")
    sent = sent_by_update_actor(VERLTrainer, "dpo", batch, actor, fields=fields, trainer_gpus=gpus)
    per_gpu = tu.get(sent, "mini_batch_size") // gpus
    mini_batch = next(iter(tu.make_iterator(sent, per_gpu, epochs=1, seed=42, dataloader_kwargs={})))
    settings = {"use_dynamic_bsz": False, "micro_batch_size_per_gpu": actor.ppo_micro_batch_size_per_gpu}
    settings |= {key: tu.get(sent, key) for key in ("micro_batch_size_per_gpu", "force_group_size") if key in sent}
    tu.assign_non_tensor(mini_batch, **settings)
    micro_batches, _ = prepare_micro_batches(data=mini_batch)
    return [micro["row_id"].tolist() for micro in micro_batches]


@pytest.mark.parametrize("path", [NESTED, FLAT])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_engine_dpo_shape(expect, tmp_path: Path, trinity_tree: Path, dpo_steps_patch: bool, shape, path: str):
    gpus, pairs, micro = shape
    config = dpo_config(tmp_path, layout(path, ppo_micro_batch_size_per_gpu=micro), pairs, False, gpus)
    use_cpu_unpadding()
    if expect == "bug":
        check(config)  # accepted at configuration time, whatever the GPUs get
        rows = rows_per_gpu(shape, False)  # (part of a row: verl's train_mini_batch asserts at the first update)
        if rows == int(rows) and rows % (2 * micro):  # verl's fixed split asserts at the first update
            with pytest.raises(AssertionError, match="divisible by force_group_size"):
                engine_micro_batches(config, gpus)
        return
    if cuts_a_pair(shape, dpo_steps_patch):
        value = refused_naming_a_value_that_works(config, shape, path, tmp_path)
        print(f"engine {shape_id(shape)} {path}: refused, names {value}")
        return
    warnings = [message for message in check(config) if "ppo_micro_batch_size_per_gpu counts" in message]
    assert len(warnings) == 1, warnings
    micro_rows = engine_micro_batches(config, gpus)
    print(f"engine {shape_id(shape)} {path}: micro-batch rows {micro_rows}; {warnings[0]}")
    assert all(len(rows) <= MAX_MICRO_ROWS for rows in micro_rows), micro_rows
    assert all(rows[1::2] == [row + 1 for row in rows[::2]] and rows[0] % 2 == 0 for rows in micro_rows), micro_rows
    assert sum(map(len, micro_rows)) == rows_per_gpu(shape, dpo_steps_patch)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_legacy_dpo_shape(expect, tmp_path: Path, trinity_legacy_tree: Path, dpo_steps_patch: bool, shape):
    gpus, pairs, micro = shape
    config = dpo_config(tmp_path, layout(NESTED, ppo_micro_batch_size_per_gpu=micro), pairs, False, gpus)
    if expect == "bug" and pairs % gpus:  # the legacy translation's own check, in its words
        with pytest.raises(ValueError, match=r"The batch size"):
            check(config)
        return
    if expect == "fixed" and cuts_a_pair(shape, dpo_steps_patch):
        value = refused_naming_a_value_that_works(config, shape, NESTED, tmp_path)
        print(f"legacy {shape_id(shape)}: refused, names {value}")
        return
    warnings = [message for message in check(config) if "fill" in message]
    actor = config.trainer.trainer_config.actor_rollout_ref.actor
    mini, micro_rows = actor.ppo_mini_batch_size // gpus, actor.ppo_micro_batch_size_per_gpu
    starts = mini % micro_rows == 0 and mini % 2 == 0  # the legacy worker's start-up rule, and whole pairs
    print(f"legacy {shape_id(shape)}: per GPU mini {mini} rows, micro {micro_rows} rows; starts {starts}; {warnings}")
    if expect == "bug":
        assert starts == (rows_per_gpu(shape, False) % (2 * micro) == 0)
        return
    assert starts, (mini, micro_rows)
    assert micro_rows <= MAX_MICRO_ROWS
    assert len(warnings) == (1 if starts and micro_rows < 2 * micro else 0), warnings
