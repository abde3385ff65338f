"""The checks of the distillation tests (`test_distillation_loss.py`, `test_distillation_first_call.py`): what the
patched and the vanilla trees must give for a measured case, and the ratios recorded for the test command's table."""

from __future__ import annotations

from pathlib import Path

import torch
from distillation_cases import Case, Measurement
from harness.sim import grad_ratio, record_ratio, record_relative_error

RTOL, ATOL = 1e-5, 1e-8


def relative_error(gradient: torch.Tensor, reference: torch.Tensor) -> float:
    return float((gradient - reference).norm() / reference.norm())


def vanilla_scale(case: Case, measured: Measurement, rows: torch.Tensor) -> float:
    """What vanilla's first micro-batch (``rows``) of a rank gets relative to the reference, distillation term alone:
    the global normalizer over the one agg_loss used (ranks' gradients are averaged, hence dp_size)."""
    mask = measured.response_mask
    if case.loss_agg_mode == "token-mean":
        correct, used = int(mask.sum()), measured.previous_tokens or int(mask[rows].sum()) * case.dp_size
    else:
        correct, used = len(mask), measured.previous_sequences or len(rows) * case.dp_size
    return correct / used


def check_measurement(expect: str, case: Case, measured: Measurement) -> None:
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
            expected = reference[rows] * vanilla_scale(case, measured, rows)
            torch.testing.assert_close(gradient[rows], expected, rtol=RTOL, atol=ATOL)


def record_measurement(baseline_dir: Path | None, expect: str, case: Case, measured: Measurement) -> None:
    record_ratio(baseline_dir, expect, "distill", str(case), grad_ratio(measured.gradient, measured.reference))
    error = relative_error(measured.gradient, measured.reference)
    record_relative_error(baseline_dir, expect, "distill", str(case), error)
