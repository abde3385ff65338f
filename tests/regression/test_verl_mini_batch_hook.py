"""verl's mini-batch hook (verl 0004): the engine worker runs a policy loss's hook once per optimizer mini-batch,
before the engine splits it, and checks rather than assumes that old_log_probs are the current policy's.

- On the real ``TrainingWorker`` with a stand-in engine (`harness.training_worker`), a hook registered for a
  loss mode of its own: called once per mini-batch with its index, what it returns reaches the engine with the
  mini-batch, named for ``ppo_loss``.
- Its current log-probs: ``old_log_probs`` on the first mini-batch only where the worker computed them itself
  (``infer_batch`` before the update, the same values) and took no step since; a forward of the mini-batch otherwise:
  when the trainer's log-probs are not the worker's (bypass mode's are the rollout's), and after the first update.
- On the Megatron engine the hook of a KL-Cov, Clip-Cov or bypass-mode IS batch-mean config is not run, and one
  warning at start-up says so, decided from the actor config alone.
- Vanilla has no hook (0.7.1's: verl-0.7 0003, the same change).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
from harness.sim import verl_series_on_cpu
from harness.training_worker import StubEngine, train_mini_batches

from engine_harness.sim import actor_config, make_rollout_batch
from engine_harness.worker_statistics import has_mini_batch_hooks

BATCH_SIZE = 16


@pytest.fixture(scope="module", autouse=True)
def _hook_tree(verl_tree: Path, verl_series: str) -> None:
    verl_series_on_cpu(verl_series, "the mini-batch hook", series=("verl", "verl-0.7"))


class _Hook:
    """Records what the worker gives it and returns one value a row."""

    def __init__(self):
        self.calls: list[tuple[torch.Tensor, torch.Tensor, int]] = []

    def __call__(self, data, context):
        self.calls.append((data["row_id"].clone(), context.current_log_probs().clone(), context.mini_batch_index))
        return {"hook_value": data["row_id"].double()}


def _batch():
    batch = make_rollout_batch(BATCH_SIZE, seed=31, extra_fields=("old_log_probs", "advantages"))
    batch["old_log_probs"] = -batch["old_log_probs"].abs()
    return batch


def _train(hook: _Hook, engine: StubEngine, infer_first: bool) -> None:
    train_mini_batches(engine, _batch(), BATCH_SIZE // 2, infer_first=infer_first, mini_batch_hooks=[hook])


def test_mini_batch_hook_runs_once_per_mini_batch_before_the_split(expect):
    if expect == "bug":
        assert not has_mini_batch_hooks(), "the vanilla tree runs hooks: update the audit"
        return
    from verl.utils import tensordict_utils as tu

    hook, engine = _Hook(), StubEngine(_batch()["old_log_probs"])
    _train(hook, engine, infer_first=False)

    assert [index for _, _, index in hook.calls] == [0, 1]
    for (rows, _, _), sent in zip(hook.calls, engine.trained, strict=True):
        torch.testing.assert_close(sent["hook_value"], rows.double())
        assert tu.get(sent, "policy_loss_input_keys") == ("hook_value",)


@pytest.mark.parametrize("case", ["computed by the worker", "not computed by the worker", "the rollout's"])
def test_mini_batch_hook_reads_old_log_probs_only_where_checked(expect, case):
    if expect == "bug":
        assert not has_mini_batch_hooks(), "the vanilla tree runs hooks: update the audit"
        return
    batch = _batch()
    current = batch["old_log_probs"] + 0.3  # the policy after the first update
    before_update = batch["old_log_probs"] if case != "the rollout's" else batch["old_log_probs"] - 0.2
    hook, engine = _Hook(), StubEngine(current, before_update=before_update)
    _train(hook, engine, infer_first=case != "not computed by the worker")

    forwards = engine.inferred - (case != "not computed by the worker")
    assert forwards == (1 if case == "computed by the worker" else 2), "a forward where not checked current"
    mask = batch["response_mask"].bool()
    for update, (rows, log_probs, _) in enumerate(hook.calls):
        # the policy's log-probs: before the first update old_log_probs' (the rollout's differ), after it others
        expected = before_update if update == 0 else current
        torch.testing.assert_close(log_probs[mask[rows]], expected[rows][mask[rows]])


def _megatron_config(loss_mode: str):
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.workers.config import PolicyLossConfig

    if loss_mode == "bypass_mode":
        correction = RolloutCorrectionConfig(
            rollout_is="token", rollout_is_batch_normalize=True, bypass_mode=True, loss_type="reinforce"
        )
        policy_loss = PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=correction)
    else:
        policy_loss = PolicyLossConfig(loss_mode=loss_mode)
    config = actor_config("token-mean", policy_loss=policy_loss)
    object.__setattr__(config, "strategy", "megatron")
    return config


@pytest.mark.parametrize("loss_mode", ["kl_cov", "clip_cov", "bypass_mode"])
def test_mini_batch_hook_megatron_engine_warns_at_start_up(expect, loss_mode, caplog):
    """What ``init_model`` asks for on the Megatron engine: no hook, and one warning naming the loss mode."""
    if expect == "bug":
        assert not has_mini_batch_hooks(), "the vanilla tree runs hooks: update the audit"
        return
    import verl.trainer.ppo.core_algos as core_algos

    with caplog.at_level(logging.WARNING, logger=core_algos.__name__):
        assert core_algos.get_mini_batch_hook(_megatron_config(loss_mode)) is None
    warnings = [record.getMessage() for record in caplog.records if record.name == core_algos.__name__]
    assert len(warnings) == 1 and f"loss_mode={loss_mode}" in warnings[0] and "megatron" in warnings[0]
