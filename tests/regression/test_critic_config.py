"""verl critic config: ``critic.loss_scale_factor`` exists, follows the actor's, and the generated configs agree.

On the patched tree `CriticConfig` accepts the field, Hydra's composition of ``ppo_trainer`` gives the critic
the actor's ``loss_scale_factor``, and each flattened ``_generated_ppo_*.yaml`` carries the same critic section
as the composition it was generated from (verl's pre-commit fails on any difference). On the vanilla tree the
field is absent everywhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine_harness.sim import critic_model_fields

# the flattened configs verl's scripts/generate_trainer_config.sh writes (verl 0.7.0 has the first two only)
GENERATED_CONFIGS = (
    "_generated_ppo_trainer.yaml",
    "_generated_ppo_megatron_trainer.yaml",
    "_generated_ppo_torchtitan_trainer.yaml",
    "_generated_ppo_veomni_trainer.yaml",
)
# the command each file's header names: "python3 scripts/print_cfg.py --cfg job [--config-name=X.yaml] [overrides]"
_PRINT_CFG = re.compile(r"print_cfg\.py --cfg job(?P<args>[^']*)'")


def _compose(verl_tree: Path, overrides: list[str], config_name: str = "ppo_trainer"):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_tree / "verl/trainer/config"), version_base=None):
        return compose(config_name=config_name, overrides=overrides)


def _generation(generated: Path) -> tuple[str, list[str]]:
    """(config name, overrides) of the composition a generated file's header says it flattens: verl 0.8.0 composes
    ppo_trainer with model_engine=megatron, 0.7.x names ppo_megatron_trainer."""
    match = _PRINT_CFG.search(generated.read_text(encoding="utf-8")[:2000])
    assert match, f"{generated.name} does not name the print_cfg.py command it was generated with"
    config_name, overrides = "ppo_trainer", []
    for arg in match["args"].split():
        if arg.startswith("--config-name="):
            config_name = arg.removeprefix("--config-name=").removesuffix(".yaml")
        else:
            overrides.append(arg)
    return config_name, overrides


def test_critic_config_accepts_loss_scale_factor(expect, verl_tree):
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    section = OmegaConf.create(
        {
            "_target_": "verl.workers.config.CriticConfig",
            "strategy": "fsdp",
            "ppo_micro_batch_size_per_gpu": 2,
            "loss_scale_factor": 512,
            **critic_model_fields(),
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

    path = verl_tree / "verl/trainer/config" / generated_name
    if not path.exists():
        pytest.skip(f"this verl release has no {generated_name}")
    config_name, overrides = _generation(path)
    composed = _compose(verl_tree, overrides, config_name)
    generated = OmegaConf.load(path)

    composed_critic = OmegaConf.to_container(composed.critic, resolve=False)
    generated_critic = OmegaConf.to_container(generated.critic, resolve=False)
    assert generated_critic == composed_critic
    if expect == "fixed":
        assert generated_critic["loss_scale_factor"] == "${oc.select:actor_rollout_ref.actor.loss_scale_factor,null}"
    else:
        assert "loss_scale_factor" not in generated_critic
