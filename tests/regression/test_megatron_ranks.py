"""Megatron's parallel state on real gloo ranks: the sizes the loss weights read, as megatron-core defines them.

Runs only where megatron-core is installed. The test environment (requirements/lock.txt) leaves it out: its schedules,
DDP and model forward need CUDA, so it runs no training step here, and this check is run by hand (docs/evidence/
2026-12-05-megatron.md gives the command: a venv linked to the test environment plus ``megatron-core==0.16.1``).

Four gloo ranks initialize megatron-core 0.16.1's parallel state (``initialize_model_parallel``) in each shape of
``megatron_ranks.RANK_SHAPES`` (tensor, pipeline and context parallel 1, 2 and 4, the rest data parallel), and each
rank reads what verl 0.8.0's Megatron engine gives its loss (its own ``get_data_parallel_group``,
``get_data_parallel_rank`` and ``get_data_parallel_size``) and what Trinity's legacy Megatron actor with 0008 does
(``mpu.get_data_parallel_group()``, ``mpu.get_data_parallel_world_size()``), and runs megatron-core's
``forward_step_calc_loss`` on a loss of 1. Invariant: the rank layout and data parallel groups are those
``megatron_shapes.MegatronShape`` follows in ``test_megatron_parallel_sizes.py``; the token count all-reduced over the
data parallel group counts each data parallel rank once and no tensor, pipeline or context parallel copy; the dp size
is the number of data parallel ranks, without context parallel ones; the schedule scales the loss by cp /
num_microbatches on the last pipeline stage.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from megatron_ranks import NUM_MICROBATCHES, WORLD, megatron_rank

from patchset.plumbing.children import run_children

RANKS_DEADLINE_S = 300


def _megatron_core_installed() -> bool:
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except (ImportError, ValueError):  # a stand-in in sys.modules (megatron_sim.py) has no spec
        return False


@pytest.mark.skipif(
    not _megatron_core_installed(), reason="megatron-core is not installed (not in the lock: see the docstring)"
)
def test_megatron_parallel_state_sizes_the_losses_read(verl_tree: Path, tmp_path: Path):
    out = [tmp_path / f"rank{rank}.json" for rank in range(WORLD)]
    codes = run_children(
        megatron_rank,
        [(rank, str(tmp_path / "store"), str(out[rank])) for rank in range(WORLD)],
        RANKS_DEADLINE_S,
        "megatron rank",
        ("torch", "megatron.core", "verl.workers.engine.megatron.transformer_impl"),
    )
    assert codes == [0] * WORLD, f"rank exit codes {codes}"
    for rank_file in out:
        for seen in json.loads(rank_file.read_text(encoding="utf-8")):
            shape_dp = len(seen["expected_dp_group"])
            where = f"{seen['shape']} rank {seen['rank']}"
            print(
                f"{where}: coordinates (tp, cp, dp, pp) {seen['coordinates']}, dp group {seen['dp_group']}, "
                f"dp size {seen['dp_size']} (dp x cp {seen['dp_cp_size']}), tokens {seen['tokens']}, "
                f"loss 1 scheduled {seen['scheduled_loss']}"
            )
            assert seen["coordinates"] == seen["expected_coordinates"], where
            assert seen["dp_group"] == seen["expected_dp_group"], where
            assert seen["dp_size"] == seen["legacy_dp_size"] == shape_dp, where
            assert seen["tokens"] == seen["legacy_tokens"] == seen["expected_tokens"], where
            cp = seen["dp_cp_size"] // shape_dp
            if seen["last_stage"]:
                assert seen["scheduled_loss"] == pytest.approx(cp / NUM_MICROBATCHES), where
