"""verl's KL-Cov (``policy_loss.loss_mode: kl_cov``, verl 0004): the tokens it penalizes are chosen over the optimizer
mini-batch, across data-parallel ranks, so the split and the number of ranks do not change the update.

- Through the real ``ppo_loss`` and verl's no-padding conversion and micro-batch splitter (`engine_harness.sim`),
  where the tree has ``compute_kl_cov_mask`` the harness calls it as the engine worker does, on each rank's
  mini-batch before the split (at dp 2 in two gloo processes: `engine_harness.cov_selection`). The data has a clear
  gap at the selection boundary: k = max(1, int(ratio x the mini-batch's tokens)) planted tokens, all in the first
  rows, whose covariance is about 4 times any other token's, so no near-tie can flip a pick. The chosen tokens are
  read off the gradient (a chosen token's gradient carries ``ppo_kl_coef x sign(logp - old_logp) / N`` more).
- Patched: for K = 1, 2, 4 fixed and a token-budget split, at dp 1 and 2, the chosen tokens are the planted ones,
  and the gradient equals one micro-batch's (rtol 1e-5). Vanilla: every micro-batch picks its own top tokens with its
  own means, so the micro-batches and ranks without planted tokens penalize others: the chosen tokens differ.
- The worker's wiring, on the real ``TrainingWorker`` with a stand-in engine: ``train_mini_batch`` hands the engine
  each mini-batch with ``kl_cov_mask``, chosen from ``old_log_probs`` on the first update and from a forward of the
  current policy (``engine.infer_batch``) after it. Vanilla sends no mask.
"""

from __future__ import annotations

import inspect
from contextlib import nullcontext
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine_harness.cov_selection import has_mini_batch_selection, kl_cov_masks
from engine_harness.sim import (
    RESPONSE_LEN,
    Split,
    actor_config,
    engine_gradient,
    make_rollout_batch,
    pack_model_output,
    use_cpu_unpadding,
)

BATCH_SIZE = 32
KL_COV_RATIO = 0.05
PPO_KL_COEF = 1.0
SPLITS = [(1, Split(2)), (1, Split(4)), (1, Split(3, dynamic=True)), (2, Split(1)), (2, Split(2, dynamic=True))]


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(verl_tree: Path, verl_series: str) -> None:
    if verl_series != "verl":
        pytest.skip(f"KL-Cov's mini-batch selection is in the verl series only (0.8.0, 0.9.1), not {verl_series}")
    use_cpu_unpadding()


def _inputs():
    """A rollout batch, the current log-probs, and the planted tokens: the first k valid ones in row order."""
    batch = make_rollout_batch(BATCH_SIZE, seed=12, extra_fields=("advantages",))
    generator = torch.Generator().manual_seed(13)
    shape = (BATCH_SIZE, RESPONSE_LEN)
    log_probs = -torch.rand(shape, generator=generator)
    batch["old_log_probs"] = log_probs + 0.05 * torch.randn(shape, generator=generator)
    advantages = 0.1 * torch.randn(shape, generator=generator)
    valid = batch["response_mask"].bool()
    k = max(1, int(int(valid.sum()) * KL_COV_RATIO))
    planted = valid.flatten().nonzero().squeeze(-1)[:k]
    # a large advantage and a log-prob near 0 (the mean is about -0.5): a covariance far above every other token's
    advantages.view(-1)[planted] = 2.0 + 0.1 * torch.arange(k)
    log_probs.view(-1)[planted] = -0.01 * (1 + torch.arange(k) / k)
    batch["advantages"] = advantages
    chosen = torch.zeros(shape, dtype=torch.bool)
    chosen.view(-1)[planted] = True
    return batch, {"log_probs": log_probs}, chosen


def _kl_cov_config():
    from verl.workers.config import PolicyLossConfig

    policy_loss = PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=KL_COV_RATIO, ppo_kl_coef=PPO_KL_COEF)
    return actor_config("token-mean", policy_loss=policy_loss)


@cache
def _worker_masks(dp_size: int) -> torch.Tensor | None:
    """What the worker chooses for each rank (the same for every split: it chooses before the split)."""
    batch, outputs, _ = _inputs()
    return kl_cov_masks(batch["advantages"], outputs["log_probs"], batch["response_mask"], KL_COV_RATIO, dp_size)


def _gradient_and_chosen(dp_size: int, split: Split) -> tuple[torch.Tensor, torch.Tensor]:
    from verl.workers.utils.losses import ppo_loss

    batch, outputs, _ = _inputs()
    mask = _worker_masks(dp_size)
    if mask is not None:
        batch["kl_cov_mask"] = mask
    configs = [_kl_cov_config() for _ in range(dp_size)]
    loss_fns = [lambda model_output, data, config=config: ppo_loss(config, model_output, data) for config in configs]
    gradient, _ = engine_gradient(loss_fns, batch, outputs, split, dp_size=dp_size)
    # token-mean over the mini-batch's N tokens: -A * ratio / N, plus ppo_kl_coef * sign(logp - old) / N if chosen
    valid = batch["response_mask"].bool()
    ratio = torch.exp(outputs["log_probs"] - batch["old_log_probs"])
    penalty = gradient.reshape(valid.shape) * valid.sum() + batch["advantages"] * ratio
    return gradient, (penalty.abs() > PPO_KL_COEF / 2) & valid


@pytest.mark.parametrize(("dp_size", "split"), SPLITS, ids=str)
def test_kl_cov_chooses_over_the_mini_batch_against_one_micro_batch(expect, dp_size, split):
    reference, reference_chosen = _gradient_and_chosen(1, Split(1))
    gradient, chosen = _gradient_and_chosen(dp_size, split)
    _, _, planted = _inputs()

    assert torch.equal(reference_chosen, planted), "one micro-batch must penalize the planted tokens"
    if expect == "fixed":
        hits = int((chosen & planted).sum())
        assert torch.equal(chosen, planted), f"chose {int(chosen.sum())} tokens, {hits} of them planted"
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-8)
    else:
        assert not torch.equal(chosen, planted), "the vanilla tree chose over the mini-batch: update the audit"


class _Engine:
    """What ``TrainingWorker.train_mini_batch`` and ``train_batch`` ask of the engine, recording each mini-batch it
    is sent; ``infer_batch`` returns ``log_probs`` (the current policy's) in the engine's no-padding layout."""

    def __init__(self, log_probs: torch.Tensor):
        self.log_probs = log_probs
        self.trained: list = []
        self.inferred = 0

    def train_mode(self, **kwargs):
        return nullcontext()

    def train_batch(self, data, loss_function):
        self.trained.append(data)
        return {}

    def infer_batch(self, data, loss_function=None):
        self.inferred += 1
        return {"model_output": {"log_probs": pack_model_output(data, self.log_probs[data["row_id"]])}}

    def get_data_parallel_size(self):
        return 1

    def get_data_parallel_rank(self):
        return 0

    def get_data_parallel_group(self):
        return None

    def is_mp_src_rank_with_outputs(self):
        return False

    def lr_scheduler_step(self):
        return 0.0


def test_kl_cov_worker_sends_the_mini_batch_choice(expect, verl_tree: Path):
    from verl.utils import tensordict_utils as tu
    from verl.utils.profiler import DistProfiler
    from verl.workers.engine_workers import TrainingWorker
    from verl.workers.utils.padding import left_right_2_no_padding

    batch, outputs, _ = _inputs()
    # the policy after the first update: its log-probs differ from old_log_probs
    engine = _Engine(outputs["log_probs"])
    worker = object.__new__(TrainingWorker)  # the methods under test need only these
    worker.engine = engine
    worker.loss_fn = lambda *args: None
    worker.model_config = {}
    worker.engine_config = SimpleNamespace(
        forward_only=False,
        use_dynamic_bsz=False,
        max_token_len_per_gpu=None,
        micro_batch_size_per_gpu=4,
        use_fused_kernels=False,
    )
    worker.kl_cov_config = _kl_cov_config()
    worker.profiler = DistProfiler(rank=0, config=None)  # disabled; verl 0.9.1 steps it once per mini-batch
    data = left_right_2_no_padding(batch)
    del data["input_ids"]  # its token count is all-gathered for the MFU: not what this test is about
    tu.assign_non_tensor(data, mini_batch_size=BATCH_SIZE // 2, epochs=1)
    inspect.unwrap(TrainingWorker.train_mini_batch)(worker, data)

    assert len(engine.trained) == 2
    if expect == "bug":
        assert all("kl_cov_mask" not in mini_batch for mini_batch in engine.trained)
        return
    from verl.trainer.ppo.core_algos import compute_kl_cov_mask

    assert engine.inferred == 1, "one forward: for the second mini-batch only"
    for mini_batch, log_prob_key in zip(engine.trained, ("old_log_probs", "current"), strict=True):
        rows = mini_batch["row_id"]
        log_prob = batch["old_log_probs"][rows] if log_prob_key == "old_log_probs" else outputs["log_probs"][rows]
        expected = compute_kl_cov_mask(
            batch["advantages"][rows], log_prob, batch["response_mask"][rows], config=_kl_cov_config()
        )
        assert torch.equal(mini_batch["kl_cov_mask"], expected), f"the mask of the {log_prob_key} log-probs"


def test_kl_cov_selection_is_in_the_tree_under_test(expect, verl_tree: Path):
    """The other tests take the worker's path only where the tree has it: check that it is there when patched."""
    assert has_mini_batch_selection() == (expect == "fixed")
