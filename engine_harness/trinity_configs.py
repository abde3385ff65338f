"""Trinity algorithm configs as Trinity's own config validator completes them."""

from __future__ import annotations


def algorithm_config(algorithm_type: str, loss_agg_mode: str, kl: bool = True, entropy: bool = True):
    """An AlgorithmConfig as Trinity's config validator completes it for ``algorithm_type``."""
    from trinity.algorithm import ALGORITHM_TYPE, ENTROPY_LOSS_FN, KL_FN, POLICY_LOSS_FN
    from trinity.common.config import AlgorithmConfig

    defaults = ALGORITHM_TYPE.get(algorithm_type).default_config()
    # each term: its registry, the function the validator picks, and what these tests set over its default args
    terms = {
        "policy_loss_fn": (POLICY_LOSS_FN, defaults["policy_loss_fn"], {}),
        "kl_loss_fn": (KL_FN, defaults.get("kl_loss_fn", "k2") if kl else "none", {"kl_coef": 0.05} if kl else {}),
        "entropy_loss_fn": (
            ENTROPY_LOSS_FN,
            "default" if entropy else "none",
            {"entropy_coef": 0.01} if entropy else {},
        ),
    }
    fields = {"algorithm_type": algorithm_type, "loss_agg_mode": loss_agg_mode}
    for field, (registry, name, overrides) in terms.items():
        fields[field], fields[f"{field}_args"] = name, {**registry.get(name).default_args(), **overrides}
    if "loss_agg_mode" in fields["policy_loss_fn_args"]:
        fields["policy_loss_fn_args"]["loss_agg_mode"] = loss_agg_mode
    return AlgorithmConfig(**fields)


def default_loss_scale_switch(trainer_type: str = "verl") -> bool:
    """``trainer.fix_actor_microbatch_loss_scale`` as the tree under test gives it to a ``trainer_type`` config that
    does not set it: `TrainerConfig`'s default, through Trinity's real `TrainerConfigValidator` (upstream: False for
    every trainer; this patchset's carried 0010: unset, resolved to on for veRL, off for Tinker). An explorer's config
    (mode ``explore``): the validator resolves the switch and leaves the rest of the trainer alone."""
    from trinity.common.config import Config
    from trinity.common.config_validator import TrainerConfigValidator

    config = Config(mode="explore")
    config.trainer.trainer_type = trainer_type
    TrainerConfigValidator().validate(config)
    return config.trainer.fix_actor_microbatch_loss_scale
