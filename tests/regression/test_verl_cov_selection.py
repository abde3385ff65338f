"""verl's KL-Cov and Clip-Cov (``policy_loss.loss_mode: kl_cov`` / ``clip_cov``, verl 0006 / 0005 on verl 0004's
mini-batch hook; verl-0.7 0003 on 0.7.1): the tokens they penalize or clip are chosen over the optimizer mini-batch,
across data-parallel ranks, so the split and the number of ranks do not change the update.

- Through the real ``ppo_loss`` and verl's no-padding conversion and micro-batch splitter (`harness.sim`),
  where the tree has the selection functions the harness calls them as the engine worker does, on each rank's
  mini-batch before the split (at dp 2 in two gloo processes: `harness.cov_selection`). The chosen tokens are
  read off the gradient: KL-Cov's carry ``ppo_kl_coef x sign(logp - old_logp) / N`` more, Clip-Cov's none at all.
  - KL-Cov: k = max(1, int(ratio x the mini-batch's tokens)) planted tokens, all in the first rows, whose covariance
    is about 4 times any other token's: a clear gap at the selection boundary, no near-tie.
  - Clip-Cov: about one valid token in six is a candidate (covariance inside the clip bounds, far from them; no
    other token near them; ratios far from PPO's clip), and the pick is seeded: the chosen tokens are the candidates
    with the smallest keys, which no tie separates.
- Patched: for K = 1, 2, 4 fixed and a token-budget split, at dp 1 and 2, the chosen tokens are one micro-batch's
  (KL-Cov: the planted ones; Clip-Cov: as many as one call over the mini-batch draws, all candidates), and the
  gradient equals one micro-batch's (rtol 1e-5). Vanilla: every micro-batch chooses from its own tokens with its own
  means (Clip-Cov at random), so the chosen tokens differ.
- The user's config switches it on: verl's own ``ppo_trainer.yaml`` with the loss mode set, through the real
  ``ActorRolloutRefWorker.init_model`` (`harness.actor_init`). Vanilla asks for nothing.
- The worker's wiring, on the real ``TrainingWorker`` with a stand-in engine: ``train_mini_batch`` hands the engine
  each mini-batch with the mask, chosen from ``old_log_probs`` on the first update (the worker computed them: its
  ``infer_batch`` ran first) and from a forward of the current policy (``engine.infer_batch``) after it (Clip-Cov: a
  fresh seed each, from the step and the mini-batch's index). Vanilla sends no mask.
- Clip-Cov's seed (verl 0005): the same in two processes with different ``PYTHONHASHSEED`` and a null
  ``data_loader_seed``, and a fresh one for each (step, mini-batch).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch
from harness.actor_init import init_actor
from harness.cov_selection import has_mini_batch_selection, worker_masks
from harness.sim import engine_gradient, verl_series_on_cpu
from harness.training_worker import StubEngine, add_loss_input, hooks_asked, train_mini_batches

from engine_harness.sim import RESPONSE_LEN, Split, actor_config, make_rollout_batch
from engine_harness.worker_statistics import asked_for

BATCH_SIZE = 32
RATIO = 0.05  # kl_cov_ratio, clip_cov_ratio
PPO_KL_COEF = 1.0
LOSS_MODES = ("kl_cov", "clip_cov")
MASK_KEYS = {"kl_cov": "kl_cov_mask", "clip_cov": "clip_cov_mask"}
# dp 2 first: a run that keeps one shape a test (PATCHSET_SAMPLE=shapes: teeth, verl 0.9.1) keeps the last, the
# token-budget split at dp 1, and starts no gloo ranks; the fix run proves dp 2 (the same selection code on 0.9.1)
# (at dp 2 every split is one more in-process gradient: the ranks choose once, before the split)
SPLITS = [(2, Split(1)), (2, Split(2)), (2, Split(4)), (2, Split(2, dynamic=True))]
SPLITS += [(1, Split(2)), (1, Split(4)), (1, Split(3, dynamic=True))]


@pytest.fixture(scope="module", autouse=True)
def _cpu_unpadding(verl_tree: Path, verl_series: str) -> None:
    verl_series_on_cpu(verl_series, "the mini-batch selection", series=("verl", "verl-0.7"))


def _inputs(loss_mode: str):
    """A rollout batch, the current log-probs, and the planted tokens: KL-Cov's k chosen ones (the first valid ones in
    row order), or Clip-Cov's candidates (every sixth valid token)."""
    batch = make_rollout_batch(BATCH_SIZE, seed=12, extra_fields=("advantages",))
    generator = torch.Generator().manual_seed(13)
    shape = (BATCH_SIZE, RESPONSE_LEN)
    log_probs = -torch.rand(shape, generator=generator)
    noise = 0.02 * torch.randn(shape, generator=generator)  # ratios of 0.95 to 1.05: PPO clips none
    advantages = 0.1 * torch.randn(shape, generator=generator)
    valid_idx = batch["response_mask"].bool().flatten().nonzero().squeeze(-1)
    k = max(1, int(len(valid_idx) * RATIO))
    planted = valid_idx[:k] if loss_mode == "kl_cov" else valid_idx[::6]
    # a large advantage and a log-prob near 0 (the mean is about -0.5): a covariance far above every other token's,
    # about 1.5 for Clip-Cov's candidates (bounds 1 and 5), about 4 times any other token's for KL-Cov's
    advantages.view(-1)[planted] = 4.0 + 0.1 * torch.arange(len(planted)) / len(planted)
    log_probs.view(-1)[planted] = -0.01 * (1 + torch.arange(len(planted)) / len(planted))
    batch["advantages"] = advantages
    batch["old_log_probs"] = log_probs + noise
    chosen = torch.zeros(shape, dtype=torch.bool)
    chosen.view(-1)[planted] = True
    return batch, {"log_probs": log_probs}, chosen


def _config(loss_mode: str):
    from verl.workers.config import PolicyLossConfig

    if loss_mode == "kl_cov":
        policy_loss = PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=RATIO, ppo_kl_coef=PPO_KL_COEF)
    else:
        policy_loss = PolicyLossConfig(loss_mode="clip_cov", clip_cov_ratio=RATIO)
    return actor_config("token-mean", policy_loss=policy_loss)


@cache
def _worker_masks(dp_size: int) -> dict[str, torch.Tensor | None]:
    """What the worker chooses for each rank, for both losses (the same for every split: it chooses before the split;
    at dp 2 one pair of gloo ranks computes both)."""
    requests = {}
    for loss_mode in LOSS_MODES:
        batch, outputs, _ = _inputs(loss_mode)
        requests[loss_mode] = (batch, outputs["log_probs"], _config(loss_mode))
    return worker_masks(requests, dp_size)


def _gradient_and_chosen(loss_mode: str, dp_size: int, split: Split) -> tuple[torch.Tensor, torch.Tensor]:
    from verl.workers.utils.losses import ppo_loss

    batch, outputs, _ = _inputs(loss_mode)
    mask = _worker_masks(dp_size)[loss_mode]
    if mask is not None:
        add_loss_input(batch, MASK_KEYS[loss_mode], mask)
    configs = [_config(loss_mode) for _ in range(dp_size)]
    loss_fns = [lambda model_output, data, config=config: ppo_loss(config, model_output, data) for config in configs]
    torch.manual_seed(0)  # vanilla's Clip-Cov draws from the global generator
    gradient, _ = engine_gradient(loss_fns, batch, outputs, split, dp_size=dp_size)
    valid = batch["response_mask"].bool()
    per_token = gradient.reshape(valid.shape)
    if loss_mode == "clip_cov":  # a clipped token's loss is multiplied by 0
        return gradient, (per_token == 0) & valid
    # token-mean over the mini-batch's N tokens: -A * ratio / N, plus ppo_kl_coef * sign(logp - old) / N if chosen
    ratio = torch.exp(outputs["log_probs"] - batch["old_log_probs"])
    penalty = per_token * valid.sum() + batch["advantages"] * ratio
    return gradient, (penalty.abs() > PPO_KL_COEF / 2) & valid


@pytest.mark.parametrize("loss_mode", LOSS_MODES)
@pytest.mark.parametrize(("dp_size", "split"), SPLITS, ids=str)
def test_cov_selection_over_the_mini_batch_against_one_micro_batch(expect, loss_mode, dp_size, split):
    reference, reference_chosen = _gradient_and_chosen(loss_mode, 1, Split(1))
    gradient, chosen = _gradient_and_chosen(loss_mode, dp_size, split)
    batch, _, planted = _inputs(loss_mode)

    k = max(1, int(int(batch["response_mask"].sum()) * RATIO))
    if loss_mode == "kl_cov":
        assert torch.equal(reference_chosen, planted), "one micro-batch must penalize the planted tokens"
    else:
        assert int(reference_chosen.sum()) == k and not (reference_chosen & ~planted).any(), "k candidates, clipped"
    if expect == "fixed":
        hits = int((chosen & reference_chosen).sum())
        assert torch.equal(chosen, reference_chosen), f"chose {int(chosen.sum())} tokens, {hits} of one micro-batch's"
        torch.testing.assert_close(gradient, reference, rtol=1e-5, atol=1e-8)
    else:
        assert not torch.equal(chosen, reference_chosen), "the vanilla tree chose over the mini-batch: update the audit"


def _expected_mask(loss_mode: str, batch, rows, log_prob, update: int) -> torch.Tensor:
    """What the worker must choose for the mini-batch of ``rows``, its ``update``-th: the real function's answer."""
    import verl.trainer.ppo.core_algos as core_algos

    config = _config(loss_mode)
    if loss_mode == "kl_cov":
        return core_algos.compute_kl_cov_mask(
            batch["advantages"][rows], log_prob, batch["response_mask"][rows], config=config
        )
    return core_algos.compute_clip_cov_mask(
        batch["old_log_probs"][rows],
        log_prob,
        batch["advantages"][rows],
        batch["response_mask"][rows],
        config=config,
        row_ids=torch.arange(len(rows)),
        seed=_clip_cov_seed(config, update),
    )


def _clip_cov_seed(config, update: int) -> int:
    """The seed the worker draws the ``update``-th mini-batch of a step with: from the step (the worker's count of
    updates, 0, where the trainer sends none) and the mini-batch's index (verl 0005); on a tree of the verl-0.7 series,
    Python's hash of the data_loader_seed and the worker's count of mini-batches."""
    import verl.trainer.ppo.core_algos as core_algos

    if hasattr(core_algos, "clip_cov_seed"):
        return core_algos.clip_cov_seed(config.data_loader_seed, 0, update)
    return hash((config.data_loader_seed, update))


@pytest.mark.parametrize("loss_mode", LOSS_MODES)
def test_cov_selection_worker_sends_the_mini_batch_choice(expect, loss_mode, verl_tree: Path):
    batch, outputs, _ = _inputs(loss_mode)
    # old_log_probs are the policy's until the first update, whose log-probs then differ
    engine = StubEngine(outputs["log_probs"], before_update=batch["old_log_probs"])
    config = _config(loss_mode)
    train_mini_batches(engine, batch, BATCH_SIZE // 2, infer_first=True, **asked_for(config))

    assert len(engine.trained) == 2
    if expect == "bug":
        assert all(MASK_KEYS[loss_mode] not in mini_batch for mini_batch in engine.trained)
        return
    assert engine.inferred == 2, "the trainer's forward, then one for the second mini-batch only"
    for update, mini_batch in enumerate(engine.trained):
        rows = mini_batch["row_id"]
        log_prob = (batch["old_log_probs"] if update == 0 else outputs["log_probs"])[rows]
        expected = _expected_mask(loss_mode, batch, rows, log_prob, update)
        assert expected.any(), "a choice that chose nothing would prove nothing"
        assert torch.equal(mini_batch[MASK_KEYS[loss_mode]], expected), f"the mask of update {update}"


@pytest.mark.parametrize("loss_mode", LOSS_MODES)
def test_cov_selection_worker_is_asked_for_by_verls_own_config(expect, loss_mode, verl_tree: Path, tmp_path: Path):
    """A user's run (verl's ppo_trainer.yaml, its FSDP actor, the loss mode set on the command line) through the real
    ``init_model``: the actor is asked to choose the tokens over each mini-batch, with the config its loss reads, and
    not for bypass mode's IS mean. Vanilla asks for nothing."""
    actor = init_actor(verl_tree, tmp_path, [f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}"])

    if expect == "bug":
        assert hooks_asked(actor) == []
        return
    assert hooks_asked(actor) == [f"{loss_mode}_mini_batch_hook"]


@pytest.mark.parametrize("loss_mode", LOSS_MODES)
def test_cov_selection_is_in_the_tree_under_test(expect, loss_mode, verl_tree: Path):
    """The other tests take the worker's path only where the tree has it: check that it is there when patched."""
    assert has_mini_batch_selection(loss_mode) == (expect == "fixed")


def test_clip_cov_seed_is_the_same_in_every_process(expect, verl_tree: Path):
    """Clip-Cov's draw must not depend on the process: its seed from a null data_loader_seed, the step and the
    mini-batch's index, here and in a process under another PYTHONHASHSEED (Python's hash(None) differs between
    processes before 3.12). That process runs the tree's own function, its source handed over, without importing
    verl (which costs about 6 CPU-s): a seed that reads anything of its module's but typing fails there by name."""
    import inspect
    import os
    import subprocess
    import sys

    import verl.trainer.ppo.core_algos as core_algos

    if expect == "bug":
        assert not hasattr(core_algos, "clip_cov_seed"), "the vanilla tree has no seed of its own: update the audit"
        return
    code = "import sys, typing; n = dict(vars(typing)); exec(sys.stdin.read(), n); s = n['clip_cov_seed']\n"
    code += "print(s(None, 3, 1), s(None, 4, 1))"
    other = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    source = inspect.getsource(core_algos.clip_cov_seed)
    child = [sys.executable, "-S", "-c", code]
    env = os.environ | {"PYTHONHASHSEED": other}
    output = subprocess.run(child, input=source, env=env, capture_output=True, text=True, check=True).stdout
    assert output == f"{core_algos.clip_cov_seed(None, 3, 1)} {core_algos.clip_cov_seed(None, 4, 1)}\n"
    seeds = {core_algos.clip_cov_seed(None, step, index) for step in range(4) for index in range(4)}
    assert len(seeds) == 16, "a fresh draw for each mini-batch of each step"


def test_kl_cov_mask_is_the_mini_batch_top_k(expect, verl_tree: Path):
    """KL-Cov's choice over the whole mini-batch (verl 0006; verl-0.7 0003): exactly the planted tokens, whose
    covariance is far above every other token's. Vanilla has no such choice: each micro-batch chooses its own."""
    import verl.trainer.ppo.core_algos as core_algos

    if expect == "bug":
        assert not hasattr(core_algos, "compute_kl_cov_mask"), "the vanilla tree chooses over the mini-batch"
        return
    batch, outputs, planted = _inputs("kl_cov")
    mask = core_algos.compute_kl_cov_mask(
        batch["advantages"], outputs["log_probs"], batch["response_mask"], config=_config("kl_cov")
    )
    assert torch.equal(mask, planted)
