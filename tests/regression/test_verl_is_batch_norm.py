"""verl's bypass mode with ``loss_type: reinforce`` and ``rollout_is_batch_normalize`` (verl 0007 on verl 0004's
mini-batch hook, its option on by default with 0008; verl-0.7 0004 on 0.7.1): the truncated IS weights are divided by
their mean over the optimizer mini-batch, across data-parallel ranks, so the split and the number of ranks do not
change the update.

- Through the real ``ppo_loss``, ``compute_policy_loss_bypass_mode`` and rollout-correction code, and verl's
  no-padding conversion and micro-batch splitter (`harness.sim`), where the tree has
  ``compute_rollout_is_batch_mean`` the harness calls it as the engine worker does, on each rank's mini-batch before
  the split (at dp 2 in two gloo processes: `harness.is_batch_norm`).
  - The weights run from about 0.2 in the first rows to 2 (truncated) in the last, so every micro-batch's own mean
    differs clearly from the mini-batch's; token and sequence level.
- Patched: for K = 1, 2, 4 fixed and a token-budget split, at dp 1 and 2, every micro-batch divides by the
  mini-batch's mean (its ``rollout_corr/rollout_is_batch_norm_factor``, checked against the mean computed here from
  the definition), and the gradient equals one micro-batch's (rtol 1e-5). Vanilla: every micro-batch divides by its
  own mean, so both differ. (At dp 2 the simulated ranks share this process and no process group, so vanilla's mean
  is each rank's micro-batch's; on a real group it is the mean over one micro-batch index of every rank, also not
  the mini-batch's with two micro-batches a rank.)
- The user's config switches it on: verl's own ``ppo_trainer.yaml`` with the rollout correction its example sets
  (``algorithm.rollout_correction``) and the actor settings its docs ask for, through the real
  ``ActorRolloutRefWorker.init_model`` (`harness.actor_init`); bypass PPO-clip, whose weights only feed
  metrics, pays no forward. Vanilla asks for nothing.
- The worker's wiring, on the real ``TrainingWorker`` with a stand-in engine: ``train_mini_batch`` hands the engine
  each mini-batch with the mean, from a forward of the current policy (``engine.infer_batch``): the worker computed
  log-probs first, but ``old_log_probs`` are the rollout's, so it does not take them for the current ones. Vanilla
  sends none.
- The default (verl 0008): ``rollout_is_batch_normalize_mini_batch`` is on in the dataclass and in the composed
  ``ppo_trainer.yaml``. Vanilla has no such option.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch
from harness.actor_init import compose_trainer_config, init_actor
from harness.is_batch_norm import has_mini_batch_mean, worker_batch_means
from harness.sim import engine_gradient, verl_series_on_cpu
from harness.training_worker import StubEngine, add_loss_input, hooks_asked, train_mini_batches

from engine_harness.sim import Split, actor_config, make_rollout_batch
from engine_harness.worker_statistics import asked_for

BATCH_SIZE = 32
THRESHOLD = 2.0
LEVELS = ("token", "sequence")
FACTOR = "rollout_corr/rollout_is_batch_norm_factor"
# dp 2 first: a run that keeps one shape a test (PATCHSET_SAMPLE=shapes: teeth, verl 0.9.1) keeps the last, the
# token-budget split at dp 1, and starts no gloo ranks; the fix run proves dp 2 (the same code on 0.9.1). At dp 2 two
# micro-batches a rank or more: with one, vanilla's all-reduce over the ranks (one micro-batch index) is the
# mini-batch's mean (at dp 2 each split is one more in-process gradient: the ranks take the mean once, before the split)
SPLITS = [(2, Split(2)), (2, Split(4)), (2, Split(2, dynamic=True))]
SPLITS += [(1, Split(2)), (1, Split(4)), (1, Split(3, dynamic=True))]
# bypass mode as verl's examples/rollout_correction sets it (algorithm.rollout_correction), with what
# docs/algo/rollout_corr.md asks of the actor: the loss mode, and the rollout correction in its policy_loss
BYPASS_MODE = [
    "algorithm.rollout_correction.rollout_is=sequence",
    "algorithm.rollout_correction.rollout_is_batch_normalize=true",
    "algorithm.rollout_correction.bypass_mode=true",
    "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode",
    "+actor_rollout_ref.actor.policy_loss.rollout_correction=${algorithm.rollout_correction}",
]


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(verl_tree: Path, verl_series: str) -> None:
    verl_series_on_cpu(verl_series, "the mini-batch IS mean", series=("verl", "verl-0.7"))


@cache
def _inputs():
    """A rollout batch whose ``old_log_probs`` are the rollout's (bypass mode), and the current log-probs: per-token
    log ratios rising from -1.5 in the first row to 0.8 in the last, with noise."""
    batch = make_rollout_batch(BATCH_SIZE, seed=21, extra_fields=("advantages",))
    generator = torch.Generator().manual_seed(22)
    shape = batch["response_mask"].shape
    log_probs = -torch.rand(shape, generator=generator)
    log_ratio = (
        -1.5 + 2.3 * torch.arange(BATCH_SIZE)[:, None] / BATCH_SIZE + 0.2 * torch.randn(shape, generator=generator)
    )
    batch["old_log_probs"] = log_probs - log_ratio
    return batch, {"log_probs": log_probs}


def _config(rollout_is: str):
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config import PolicyLossConfig

    rollout_correction = RolloutCorrectionConfig(
        rollout_is=rollout_is,
        rollout_is_threshold=THRESHOLD,
        rollout_is_batch_normalize=True,
        rollout_rs=None,
        bypass_mode=True,
        loss_type="reinforce",
    )
    policy_loss = PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=rollout_correction)
    return actor_config("token-mean", policy_loss=policy_loss)


def _defined_mean(rollout_is: str, rows=None) -> float:
    """The mean of the truncated weights over ``rows`` (all: None), from the definition (not verl's code)."""
    batch, outputs = _inputs()
    rows = slice(None) if rows is None else rows
    mask = batch["response_mask"][rows].bool()
    log_ratio = (outputs["log_probs"] - batch["old_log_probs"])[rows]
    if rollout_is == "token":
        return float(log_ratio.exp().clamp(max=THRESHOLD)[mask].mean())
    return float((log_ratio * mask).sum(-1).exp().clamp(max=THRESHOLD)[mask.any(-1)].mean())


def _mean_request(rollout_is: str) -> dict:
    """The arguments of ``compute_rollout_is_batch_mean`` for the whole mini-batch."""
    batch, outputs = _inputs()
    return {
        "log_prob": outputs["log_probs"],
        "rollout_log_prob": batch["old_log_probs"],
        "response_mask": batch["response_mask"],
        "rollout_is": rollout_is,
        "rollout_is_threshold": THRESHOLD,
    }


@cache
def _worker_means(dp_size: int) -> dict[str, torch.Tensor] | None:
    """What the worker computes for each rank, for both levels (the same for every split: it computes before the
    split; at dp 2 one pair of gloo ranks computes both)."""
    return worker_batch_means({level: _mean_request(level) for level in LEVELS}, dp_size)


def _gradient_and_factors(rollout_is: str, dp_size: int, split: Split, worker_mean: bool = True):
    from verl.workers.utils.losses import ppo_loss

    batch, outputs = _inputs()
    batch = batch.clone()
    means = _worker_means(dp_size) if worker_mean else None
    if means is not None:
        add_loss_input(batch, "rollout_is_batch_mean", means[rollout_is])
    configs = [_config(rollout_is) for _ in range(dp_size)]
    loss_fns = [lambda model_output, data, config=config: ppo_loss(config, model_output, data) for config in configs]
    gradient, metrics = engine_gradient(loss_fns, batch, outputs, split, dp_size=dp_size)
    factors = [sum(metric[FACTOR].values) / len(metric[FACTOR].values) for metric in metrics]
    return gradient, torch.tensor(factors, dtype=torch.float64)


@pytest.mark.parametrize("rollout_is", LEVELS)
@pytest.mark.parametrize(("dp_size", "split"), SPLITS, ids=str)
def test_is_batch_norm_over_the_mini_batch_against_one_micro_batch(expect, rollout_is, dp_size, split):
    # one call over the whole mini-batch, its own mean: upstream's loss as it was meant
    reference, (reference_factor,) = _gradient_and_factors(rollout_is, 1, Split(1), worker_mean=False)
    gradient, factors = _gradient_and_factors(rollout_is, dp_size, split)

    mean = _defined_mean(rollout_is)
    assert reference_factor.item() == pytest.approx(mean, rel=1e-6), "one micro-batch must divide by its mean"
    first_half = _defined_mean(rollout_is, slice(0, BATCH_SIZE // 2))
    assert abs(first_half / mean - 1) > 0.2, "the data must make a micro-batch's own mean differ"
    if expect == "fixed":
        torch.testing.assert_close(factors, torch.full_like(factors, mean), rtol=1e-6, atol=0)
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-8)
    else:
        assert not torch.allclose(factors, torch.full_like(factors, mean), rtol=1e-3), "vanilla took the mini-batch's"
        assert not torch.allclose(gradient, reference, rtol=1e-3, atol=1e-8)


@pytest.mark.parametrize("rollout_is", LEVELS[:1])
def test_is_batch_norm_worker_sends_the_mini_batch_mean(expect, rollout_is, verl_tree: Path):
    batch, outputs = _inputs()
    # the current policy: bypass mode's old_log_probs are the rollout's, so the worker must ask the engine, although
    # it computed log-probs before the update
    engine = StubEngine(outputs["log_probs"])
    train_mini_batches(engine, batch.clone(), BATCH_SIZE // 2, infer_first=True, **asked_for(_config(rollout_is)))

    assert len(engine.trained) == 2
    if expect == "bug":
        assert all("rollout_is_batch_mean" not in mini_batch for mini_batch in engine.trained)
        return
    assert engine.inferred == 3, "the trainer's forward, then one a mini-batch"
    for mini_batch in engine.trained:
        rows = mini_batch["row_id"]
        mean = _defined_mean(rollout_is, rows)
        sent = mini_batch["rollout_is_batch_mean"]
        torch.testing.assert_close(sent, torch.full_like(sent, mean), rtol=1e-6, atol=0)


def test_is_batch_norm_worker_is_asked_for_by_verls_own_config(expect, verl_tree: Path, tmp_path: Path):
    """A user's bypass-mode run through the real ``init_model``: with REINFORCE the actor is asked for the
    mini-batch's IS mean, with the config its loss reads, and not for KL-Cov's tokens; with PPO-clip for nothing."""
    reinforce = init_actor(verl_tree, tmp_path, [*BYPASS_MODE, "algorithm.rollout_correction.loss_type=reinforce"])
    ppo_clip = init_actor(verl_tree, tmp_path, [*BYPASS_MODE, "algorithm.rollout_correction.loss_type=ppo_clip"])

    assert hooks_asked(ppo_clip) == []
    if expect == "bug":
        assert hooks_asked(reinforce) == []
        return
    assert hooks_asked(reinforce) == ["rollout_is_batch_mean_hook"]


def test_is_batch_norm_is_in_the_tree_under_test(expect, verl_tree: Path):
    """The other tests take the worker's path only where the tree has it: check that it is there when patched."""
    assert has_mini_batch_mean() == (expect == "fixed")


def test_is_batch_norm_default_takes_the_mini_batch_mean(expect, verl_tree: Path):
    """The option that takes the mean over the mini-batch is on by default (verl 0008): in ``RolloutCorrectionConfig``
    and in verl's own ``ppo_trainer.yaml`` as Hydra composes it (verl-0.7 0007 on 0.7.1)."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    composed = compose_trainer_config(verl_tree, []).algorithm.rollout_correction
    if expect == "bug":
        assert not hasattr(RolloutCorrectionConfig(), "rollout_is_batch_normalize_mini_batch")
        assert "rollout_is_batch_normalize_mini_batch" not in composed
        return
    assert RolloutCorrectionConfig().rollout_is_batch_normalize_mini_batch is True
    assert composed.rollout_is_batch_normalize_mini_batch is True
