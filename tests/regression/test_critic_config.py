"""verl critic config: ``critic.loss_scale_factor`` exists, follows the actor's, and the generated configs agree.

On the patched tree `CriticConfig` accepts the field, Hydra's composition of ``ppo_trainer`` gives the critic
the actor's ``loss_scale_factor``, and each flattened ``_generated_ppo_*.yaml`` carries the same critic section
as the composition it was generated from (verl's pre-commit fails on any difference). On the vanilla tree the
field is absent everywhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# generated file -> the overrides verl's scripts/generate_trainer_config.sh composes it with
GENERATED_CONFIGS = {
    "_generated_ppo_trainer.yaml": [],
    "_generated_ppo_megatron_trainer.yaml": ["model_engine=megatron"],
    "_generated_ppo_torchtitan_trainer.yaml": ["model_engine=torchtitan"],
    "_generated_ppo_veomni_trainer.yaml": ["model_engine=veomni"],
}


def _compose(verl_tree: Path, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_tree / "verl/trainer/config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def test_critic_config_accepts_loss_scale_factor(expect, verl_tree):
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    section = OmegaConf.create(
        {
            "_target_": "verl.workers.config.CriticConfig",
            "strategy": "fsdp",
            "ppo_micro_batch_size_per_gpu": 2,
            "loss_scale_factor": 512,
        }
    )
    if expect == "fixed":
        assert omega_conf_to_dataclass(section).loss_scale_factor == 512
    else:
        with pytest.raises(Exception, match="loss_scale_factor"):
            omega_conf_to_dataclass(section)


def test_critic_loss_scale_factor_inherits_the_actors(expect, verl_tree):
    config = _compose(verl_tree, ["actor_rollout_ref.actor.loss_scale_factor=333"])

    if expect == "fixed":
        assert config.critic.loss_scale_factor == 333
        assert _compose(verl_tree, []).critic.loss_scale_factor is None
    else:
        assert "loss_scale_factor" not in config.critic


@pytest.mark.parametrize("generated_name", GENERATED_CONFIGS)
def test_generated_config_critic_section_matches_composition(expect, verl_tree, generated_name):
    from omegaconf import OmegaConf

    composed = _compose(verl_tree, GENERATED_CONFIGS[generated_name])
    generated = OmegaConf.load(verl_tree / "verl/trainer/config" / generated_name)

    composed_critic = OmegaConf.to_container(composed.critic, resolve=False)
    generated_critic = OmegaConf.to_container(generated.critic, resolve=False)
    assert generated_critic == composed_critic
    if expect == "fixed":
        assert generated_critic["loss_scale_factor"] == "${oc.select:actor_rollout_ref.actor.loss_scale_factor,null}"
    else:
        assert "loss_scale_factor" not in generated_critic
