"""verl on-policy distillation with GMPO (``geo_mean``) as the policy loss of its policy-gradient branch.

``DistillationLossConfig`` refuses any ``policy_loss_mode`` but ``vanilla`` in verl 0.8.0 and 0.9.1 (pinned here: a
release that lifts the check makes this test fail, and docs/loss-audit.md must then say the branch is reachable).
Past that check, the branch calls the same ``compute_policy_loss_geo_mean`` with the global batch info that
``distillation_loss`` sets, so verl 0003 covers it: the measurement sets the mode on a built config and sends the
mini-batch through verl's no-padding conversion and micro-batch splitter (`harness.sim`).

Invariant on the patched trees: the gradient equals one micro-batch's (rtol 1e-5), fixed and token-budget splits,
dp 2. On the vanilla trees (0.8.0, and 0.9.1, whose distillation fix leaves GMPO's own micro-batch mean) the
gradient is the number of micro-batches per rank times too large (within 5 % for the token-budget split,
whose micro-batches differ in size).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from distillation_cases import GEO_MEAN_BRANCH, Case, measure
from distillation_checks import RTOL, record_measurement
from harness.sim import grad_ratio

from engine_harness.sim import Split, use_cpu_unpadding

SPLITS = [(1, Split(2)), (1, Split(4, dynamic=True)), (2, Split(2))]


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(verl_distillation_tree: Path) -> None:
    use_cpu_unpadding()


def test_distillation_config_refuses_a_policy_loss_mode_other_than_vanilla(verl_distillation_tree: Path):
    from verl.workers.config import DistillationLossConfig

    with pytest.raises(NotImplementedError, match="geo_mean"):
        DistillationLossConfig(loss_mode="k1", use_policy_gradient=True, policy_loss_mode="geo_mean")


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize(("dp_size", "split"), SPLITS, ids=str)
def test_geo_mean_distillation_gradient_against_one_micro_batch(expect, baseline_dir, loss_agg_mode, dp_size, split):
    import torch

    case = Case("second mini-batch", GEO_MEAN_BRANCH, False, loss_agg_mode, dp_size, split)
    measured = measure(case)
    record_measurement(baseline_dir, expect, case, measured)
    if expect == "fixed":
        torch.testing.assert_close(measured.gradient, measured.reference, rtol=RTOL, atol=1e-8)
    else:
        # each row's gradient is scaled by the mini-batch's sequences over its micro-batch's: K for equal micro-batches
        ratio = grad_ratio(measured.gradient, measured.reference)
        tolerance = 0.05 if split.dynamic else 1e-4
        assert ratio == pytest.approx(split.num_micro_batches, rel=tolerance), f"ratio {ratio:.4f}"
