"""verl on-policy distillation: the distillation term is a share of the mini-batch loss from the first call on.

verl 0.8.0's `distillation_ppo_loss` calls `distillation_loss` before `ppo_loss`, and it is `ppo_loss` that writes
the micro-batch's ``dp_size``, ``batch_num_tokens``, ``global_batch_size`` and ``loss_scale_factor`` into
``config.global_batch_info``, the dict both branches of `distillation_loss` aggregate with (verl PR #7225, issue
#7200). Patch 0002 sets it at the top of `distillation_loss`, as verl 0.9.0 does.

Invariant on the patched tree (and on verl >= 0.9.0, where the series skips the patch and these tests run on
upstream's code): the gradient that the summed micro-batch `distillation_ppo_loss` sends into the model outputs
(the student's log-probs; the logits processor's per-token loss for forward_kl_topk), through verl's own
no-padding conversion and micro-batch splitter (`engine_sim`), equals the gradient of one micro-batch holding the
whole mini-batch on one rank (rtol 1e-5). For every ``loss_agg_mode``; the supervised branch (k3, and
forward_kl_topk) and the policy-gradient branch (k1); ``use_task_rewards`` off (the distillation term alone) and
on (added to the PPO loss); fixed-size and token-budget splits into K = 2 and 4 micro-batches; dp 2. Each in the
two situations where the stored dict is wrong (`distillation_cases`): the first call of a worker (run in a
spawned process) and a second mini-batch with other token and sequence counts than the first.

On the vanilla tree the same measurement shows exactly that defect: the rows of every micro-batch but the first
of each rank get the reference gradient, and those of the first do not. With ``use_task_rewards`` off they are
the reference scaled by the normalizer `agg_loss` should use over the one it used: on the first call the
micro-batch's own tokens (token-mean) or sequences (seq-mean-*) with ``dp_size`` 1, on a second mini-batch the
first one's counts. This module writes no file and reads none: it runs the same in overlay mode.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import torch
from distillation_cases import (
    Case,
    Measurement,
    all_cases,
    measure,
    measure_first_calls,
    module_files,
)
from engine_sim import grad_ratio, record_ratio, use_cpu_unpadding

RTOL, ATOL = 1e-5, 1e-8


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(verl_tree: Path) -> None:
    use_cpu_unpadding()


@pytest.fixture(scope="module")
def first_calls(verl_tree: Path) -> dict[str, Measurement]:
    """Every first-call case, measured in one spawned process (fresh interpreter, fresh workers per case)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        files, measurements = pool.submit(measure_first_calls, all_cases("first call")).result()
    for name, file in files.items():
        assert Path(file).resolve().is_relative_to(verl_tree), f"the spawned process imported {name} from {file}"
    return {measurement.case: measurement for measurement in measurements}


def test_distillation_loss_imported_from_the_tree_under_test(verl_tree: Path):
    for name, file in module_files().items():
        assert Path(file).resolve().is_relative_to(verl_tree), f"{name} came from {file}, not {verl_tree}"


def _relative_error(gradient: torch.Tensor, reference: torch.Tensor) -> float:
    return float((gradient - reference).norm() / reference.norm())


def _vanilla_scale(case: Case, measured: Measurement, rows: torch.Tensor) -> float:
    """What vanilla's first micro-batch (``rows``) of a rank gets relative to the reference, distillation term alone:
    the global normalizer over the one agg_loss used (ranks' gradients are averaged, hence dp_size)."""
    mask = measured.response_mask
    if case.loss_agg_mode == "token-mean":
        correct, used = int(mask.sum()), measured.previous_tokens or int(mask[rows].sum()) * case.dp_size
    else:
        correct, used = len(mask), measured.previous_sequences or len(rows) * case.dp_size
    return correct / used


def _check(expect: str, case: Case, measured: Measurement) -> None:
    gradient, reference = measured.gradient, measured.reference
    if expect == "fixed":
        torch.testing.assert_close(gradient, reference, rtol=RTOL, atol=ATOL)
        return
    first = torch.cat(measured.first_rows)
    rest = torch.ones(len(gradient), dtype=torch.bool)
    rest[first] = False
    torch.testing.assert_close(gradient[rest], reference[rest], rtol=RTOL, atol=ATOL)
    assert not torch.allclose(gradient[first], reference[first], rtol=1e-3), f"{case}: vanilla unexpectedly right"
    if not case.use_task_rewards:
        for rows in measured.first_rows:
            expected = reference[rows] * _vanilla_scale(case, measured, rows)
            torch.testing.assert_close(gradient[rows], expected, rtol=RTOL, atol=ATOL)


def _record(baseline_dir: Path | None, expect: str, case: Case, measured: Measurement) -> None:
    record_ratio(baseline_dir, expect, "distill", str(case), grad_ratio(measured.gradient, measured.reference))
    error = _relative_error(measured.gradient, measured.reference)
    record_ratio(baseline_dir, expect, "distill-e", f"{case} (relative error)", error)


@pytest.mark.parametrize("case", all_cases("first call"), ids=str)
def test_distillation_gradient_on_a_workers_first_call_invariant_to_the_split(expect, baseline_dir, first_calls, case):
    measured = first_calls[str(case)]
    _check(expect, case, measured)
    _record(baseline_dir, expect, case, measured)


@pytest.mark.parametrize("case", all_cases("second mini-batch"), ids=str)
def test_distillation_gradient_on_a_later_mini_batch_uses_its_own_counts(expect, baseline_dir, case):
    measured = measure(case)
    _check(expect, case, measured)
    _record(baseline_dir, expect, case, measured)
