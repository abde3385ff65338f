"""Trinity algorithm configs as Trinity's own config validator completes them, for the regression tests."""

from __future__ import annotations

# every loss Trinity-RFT 0.6.0 registers in POLICY_LOSS_FN (a literal, so that collection needs no Trinity tree; the
# test modules that use it check it against the registry of the tree under test)
POLICY_LOSSES = [
    "cispo",
    "dpo",
    "gspo",
    "importance_sampling",
    "mix",
    "mix_chord",
    "opmd",
    "ppo",
    "rec",
    "sapo",
    "sft",
    "sft_is",
    "sft_phi",
    "sppo",
    "topr",
]


def algorithm_config(algorithm_type: str, loss_agg_mode: str, kl: bool = True, entropy: bool = True):
    """An AlgorithmConfig as Trinity's config validator completes it for ``algorithm_type``."""
    from trinity.algorithm import ALGORITHM_TYPE, ENTROPY_LOSS_FN, KL_FN, POLICY_LOSS_FN
    from trinity.common.config import AlgorithmConfig

    defaults = ALGORITHM_TYPE.get(algorithm_type).default_config()
    policy_loss_fn = defaults["policy_loss_fn"]
    policy_loss_fn_args = POLICY_LOSS_FN.get(policy_loss_fn).default_args()
    if "loss_agg_mode" in policy_loss_fn_args:
        policy_loss_fn_args["loss_agg_mode"] = loss_agg_mode
    kl_loss_fn = defaults.get("kl_loss_fn", "k2") if kl else "none"
    kl_loss_fn_args = KL_FN.get(kl_loss_fn).default_args()
    if kl:
        kl_loss_fn_args["kl_coef"] = 0.05
    entropy_loss_fn = "default" if entropy else "none"
    entropy_loss_fn_args = ENTROPY_LOSS_FN.get(entropy_loss_fn).default_args()
    if entropy:
        entropy_loss_fn_args["entropy_coef"] = 0.01
    return AlgorithmConfig(
        algorithm_type=algorithm_type,
        policy_loss_fn=policy_loss_fn,
        policy_loss_fn_args=policy_loss_fn_args,
        kl_loss_fn=kl_loss_fn,
        kl_loss_fn_args=kl_loss_fn_args,
        entropy_loss_fn=entropy_loss_fn,
        entropy_loss_fn_args=entropy_loss_fn_args,
        loss_agg_mode=loss_agg_mode,
    )
