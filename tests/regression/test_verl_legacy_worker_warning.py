"""verl 0.7.x's legacy workers (its default, ``trainer.use_legacy_worker_impl: auto``) call the policy loss once per
micro-batch, so KL-Cov's and Clip-Cov's tokens and bypass mode's IS batch mean stay chosen within each micro-batch
there (docs/loss-audit.md, verl 0.7.x's engine path, says why they are left so); verl-0.7 0008 says so at start-up.

- verl's own ``ppo_trainer.yaml`` composed with the user's settings (`harness.actor_init`), through the real
  ``validate_config``, which ``main_ppo``'s ``TaskRunner.run`` calls once at start-up, before any worker is built.
- Patched: for KL-Cov, Clip-Cov and bypass mode's REINFORCE with ``rollout_is_batch_normalize`` on the legacy workers,
  exactly one line names the setting, says it is taken within each micro-batch and how to get the fix
  (``trainer.use_legacy_worker_impl=disable``: the engine workers, where verl-0.7 0003 and 0004 take it over the
  mini-batch). Vanilla: no such line (silent).
- On the engine workers, and for settings that take nothing per micro-batch (the vanilla loss; bypass PPO-clip, whose
  IS weights only feed metrics), no line on either tree.
- Only where the tree has legacy workers (verl 0.7.1; verl 0.8.0 and later ship none).
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from harness.actor_init import REQUIRED, compose_trainer_config

WARNING = "WARNING: actor_rollout_ref.actor."
# bypass mode set on the actor, as docs/algo/rollout_corr.md asks (verl#4912); with ppo_clip (the default loss_type)
# the weights only feed metrics
BYPASS = [
    "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode",
    "+actor_rollout_ref.actor.policy_loss.rollout_correction.rollout_is=sequence",
    "+actor_rollout_ref.actor.policy_loss.rollout_correction.rollout_is_batch_normalize=true",
]
# each setting, and what its warning names
PER_MICRO_BATCH = {
    "kl_cov": (["actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov"], "policy_loss.loss_mode=kl_cov"),
    "clip_cov": (["actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov"], "policy_loss.loss_mode=clip_cov"),
    "bypass_is": (
        [*BYPASS, "+actor_rollout_ref.actor.policy_loss.rollout_correction.loss_type=reinforce"],
        "policy_loss.rollout_correction.rollout_is_batch_normalize",
    ),
}
NOTHING_PER_MICRO_BATCH = {"vanilla": [], "bypass_ppo_clip": BYPASS}


@pytest.fixture(scope="module")
def legacy_tree(verl_tree: Path) -> Path:
    if not (verl_tree / "verl" / "workers" / "fsdp_workers.py").is_file():
        pytest.skip(f"verl at {verl_tree} has no legacy workers (verl/workers/fsdp_workers.py): nothing to warn of")
    return verl_tree


@cache
def _composed(tree: Path, overrides: tuple[str, ...]) -> Any:
    return compose_trainer_config(tree, [*REQUIRED, *overrides])


def _start_up_warnings(
    tree: Path, overrides: list[str], capsys: pytest.CaptureFixture[str], impl: str | None = None
) -> list[str]:
    """The warning lines ``validate_config`` prints for verl's trainer config with ``overrides`` and, unless None,
    ``trainer.use_legacy_worker_impl=impl`` (set on a copy of the composed config: Hydra composes each setting once)."""
    from verl.utils.config import validate_config

    config = copy.deepcopy(_composed(tree, tuple(overrides)))
    if impl is not None:
        config.trainer.use_legacy_worker_impl = impl
    capsys.readouterr()
    validate_config(config, use_reference_policy=False, use_critic=False)
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(WARNING)]


@pytest.mark.parametrize("impl", ["auto", "enable"])
@pytest.mark.parametrize("setting", list(PER_MICRO_BATCH))
def test_legacy_workers_warn_once_at_start_up(expect, legacy_tree: Path, capsys, setting: str, impl: str):
    overrides, named = PER_MICRO_BATCH[setting]
    warnings = _start_up_warnings(legacy_tree, overrides, capsys, impl)
    if expect == "bug":
        assert warnings == [], "the vanilla tree is silent"
        return
    assert len(warnings) == 1, warnings
    (warning,) = warnings
    assert named in warning
    assert "within each micro-batch on the legacy workers" in warning
    assert "trainer.use_legacy_worker_impl=disable for the engine workers" in warning


@pytest.mark.parametrize("setting", list(PER_MICRO_BATCH))
def test_legacy_warning_not_on_the_engine_workers(legacy_tree: Path, capsys, setting: str):
    overrides, _ = PER_MICRO_BATCH[setting]
    assert _start_up_warnings(legacy_tree, overrides, capsys, "disable") == []


@pytest.mark.parametrize("setting", list(NOTHING_PER_MICRO_BATCH))
def test_legacy_warning_not_for_what_is_not_per_micro_batch(legacy_tree: Path, capsys, setting: str):
    assert _start_up_warnings(legacy_tree, NOTHING_PER_MICRO_BATCH[setting], capsys) == []
