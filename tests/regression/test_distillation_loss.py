"""verl on-policy distillation: the distillation term is a share of the mini-batch loss from the first call on.

verl 0.8.0's `distillation_ppo_loss` calls `distillation_loss` before `ppo_loss`, and it is `ppo_loss` that writes
the micro-batch's ``dp_size``, ``batch_num_tokens``, ``global_batch_size`` and ``loss_scale_factor`` into
``config.global_batch_info``, the dict both branches of `distillation_loss` aggregate with (verl PR #7225, issue
#7200). Patch 0002 sets it inside `distillation_loss` where verl 0.9.0 does, just before the policy-gradient branch.

Invariant on the patched tree (and on verl >= 0.9.0, where the series skips the patch and these tests run on
upstream's code): the gradient that the summed micro-batch `distillation_ppo_loss` sends into the model outputs
(the student's log-probs; the logits processor's per-token loss for forward_kl_topk), through verl's own
no-padding conversion and micro-batch splitter (`harness.sim`), equals the gradient of one micro-batch holding
the whole mini-batch on one rank (rtol 1e-5). For every ``loss_agg_mode``; the supervised branch (k3, and
forward_kl_topk) and the policy-gradient branch (k1); ``use_task_rewards`` off (the distillation term alone) and
on (added to the PPO loss); fixed-size and token-budget splits into K = 2 and 4 micro-batches; dp 2. Each in the
two situations where the stored dict is wrong (`distillation_cases`): the first call of a worker (in a spawned
process, `test_distillation_first_call.py`) and a second mini-batch with other token and sequence counts than the
first.

On the vanilla tree the same measurement shows exactly that defect: the rows of every micro-batch but the first
of each rank get the reference gradient, and those of the first do not. With ``use_task_rewards`` off they are
the reference scaled by the normalizer `agg_loss` should use over the one it used: on the first call the
micro-batch's own tokens (token-mean) or sequences (seq-mean-*) with ``dp_size`` 1, on a second mini-batch the
first one's counts. This module writes no file and reads none: it runs the same in overlay mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from distillation_cases import all_cases, measure, module_files
from distillation_checks import check_measurement, record_measurement

from engine_harness.sim import use_cpu_unpadding


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(verl_distillation_tree: Path) -> None:
    use_cpu_unpadding()


def test_distillation_loss_imported_from_the_tree_under_test(verl_distillation_tree: Path):
    for name, file in module_files().items():
        assert Path(file).resolve().is_relative_to(verl_distillation_tree), (
            f"{name} came from {file}, not {verl_distillation_tree}"
        )


@pytest.mark.parametrize("case", all_cases("second mini-batch"), ids=str)
def test_distillation_gradient_on_a_later_mini_batch_uses_its_own_counts(expect, baseline_dir, case):
    measured = measure(case)
    check_measurement(expect, case, measured)
    record_measurement(baseline_dir, expect, case, measured)
