"""Import-order cases, each run in a fresh process of the overlay venv; prints one JSON line of observations.

- ``probe MODULE...``: import the given upstream modules in that order and nothing else, then look at every target
  whose module is now imported: does it run the overlay's code (the fix) or upstream's? (A target of a piece only
  another release has, such as verl 0.7.1's ``validate_config``, is listed apart.) Also returns what ``status`` says
  of each piece, judged from what this process has imported, without importing more.
- every case also reports ``at start``: what this process had imported before the case imported anything: every
  module of upstream's, the overlays', Hydra's and OmegaConf's, and whether torch is in (a warm parent's fork has it;
  a fresh process not).
- ``compose CONFIG MODEL_DIR``: first thing in the process, compose verl's Hydra config ``CONFIG`` and build the
  critic's dataclass with ``verl.utils.config.omega_conf_to_dataclass`` (what a user's own trainer does).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import sys
from pathlib import Path


def _overlay_code(function) -> bool:  # type: ignore[no-untyped-def]
    """The function runs the overlay's code: its code object was compiled from a file the overlays derived."""
    return "_overlay" + "/" in Path(function.__code__.co_filename).as_posix()


def _field_everywhere(module, class_name: str, name: str) -> bool:  # type: ignore[no-untyped-def]
    """The dataclass ``class_name`` of ``module`` and each of its subclasses there (FSDP, Megatron, ...) have field
    ``name``: the critic's ``loss_scale_factor`` (0001), the actor's ``policy_loss_inputs`` (0004)."""
    base = getattr(module, class_name)
    classes = [base, *(c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base))]
    return all(name in {f.name for f in dataclasses.fields(c)} for c in classes)


def _dpo(module) -> bool:  # type: ignore[no-untyped-def]
    members = vars(module.DPOLossFn)
    wrapped = members["__call__"].__closure__[0].cell_contents  # the function Trinity's PolicyLossFnMeta wraps
    return {"loss_aggregation", "group_size"} <= members.keys() and _overlay_code(wrapped)


def _trinity_policy_loss(module) -> bool:  # type: ignore[no-untyped-def]
    members = vars(module.TrinityPolicyLoss)
    methods = all(_overlay_code(members[name]) for name in ("__init__", "__call__", "_micro_batch_weight"))
    return methods and _overlay_code(module.build_trinity_loss)


def _switch_unset(module) -> bool:  # type: ignore[no-untyped-def]
    """0010: the switch is unset by default, in the dataclass and in the structured config Trinity loads YAML into."""
    from omegaconf import OmegaConf

    structured = OmegaConf.to_object(OmegaConf.structured(module.TrainerConfig))
    return module.TrainerConfig().fix_actor_microbatch_loss_scale is None and (
        structured.fix_actor_microbatch_loss_scale is None
    )


def _training_worker(module) -> bool:  # type: ignore[no-untyped-def]
    """verl 0004: the worker's methods (under verl's ``register`` wrappers) and the ones the patch adds."""
    members = vars(module.TrainingWorker)
    replaced = all(_overlay_code(inspect.unwrap(members[name])) for name in ("train_batch", "train_mini_batch"))
    return replaced and _overlay_code(members["_run_mini_batch_hooks"])


def _legacy_warning(module) -> bool | None:  # type: ignore[no-untyped-def]
    """verl-0.7 0008: ``validate_config`` runs the overlay's code; None (no target) where verl has no legacy workers
    (0.8.0 and later, whose series have no such patch)."""
    import importlib.util

    if importlib.util.find_spec("verl.workers.fsdp_workers") is None:
        return None
    return _overlay_code(module.validate_config)


# target label -> whether the imported module's object carries the fix
PROBES = {
    "verl.trainer.ppo.core_algos.compute_value_loss": lambda m: _overlay_code(m.compute_value_loss),
    "verl.workers.config.critic.CriticConfig": lambda m: _field_everywhere(m, "CriticConfig", "loss_scale_factor"),
    "verl.workers.utils.losses.value_loss": lambda m: _overlay_code(m.value_loss),
    "verl.trainer.distillation.losses.distillation_loss": lambda m: _overlay_code(m.distillation_loss),
    "verl.trainer.ppo.core_algos.compute_policy_loss_kl_cov": lambda m: _overlay_code(m.compute_policy_loss_kl_cov)
    and _overlay_code(m.compute_kl_cov_mask),
    "verl.trainer.ppo.rollout_corr_helper.compute_rollout_correction_weights": lambda m: _overlay_code(
        m.compute_rollout_correction_weights
    )
    and _overlay_code(m.compute_rollout_is_batch_mean),
    "verl.workers.config.actor.ActorConfig": lambda m: _field_everywhere(m, "ActorConfig", "policy_loss_inputs"),
    # verl 0007 and 0008: the option, on by default
    "verl.trainer.config.algorithm.RolloutCorrectionConfig": lambda m: _field_everywhere(
        m, "RolloutCorrectionConfig", "rollout_is_batch_normalize_mini_batch"
    )
    and m.RolloutCorrectionConfig().rollout_is_batch_normalize_mini_batch is True,
    "verl.workers.utils.losses.ppo_loss": lambda m: _overlay_code(m.ppo_loss),
    "verl.workers.engine_workers.TrainingWorker": _training_worker,
    "verl.workers.engine_workers.ActorRolloutRefWorker": lambda m: _overlay_code(
        inspect.unwrap(vars(m.ActorRolloutRefWorker)["init_model"])
    ),
    "verl.utils.config.validate_config": _legacy_warning,
    "trinity.algorithm.policy_loss_fn.policy_loss_fn.PolicyLossFn": lambda m: {"loss_aggregation", "group_size"}
    <= vars(m.PolicyLossFn).keys(),
    "trinity.algorithm.policy_loss_fn.rec_policy_loss.RECPolicyLossFn": lambda m: "loss_aggregation"
    in vars(m.RECPolicyLossFn),
    "trinity.algorithm.policy_loss_fn.mix_policy_loss.MIXPolicyLossFn": lambda m: "loss_aggregation"
    in vars(m.MIXPolicyLossFn),
    "trinity.algorithm.policy_loss_fn.chord_policy_loss.MIXCHORDPolicyLossFn": lambda m: "loss_aggregation"
    in vars(m.MIXCHORDPolicyLossFn),
    "trinity.algorithm.policy_loss_fn.dpo_loss.DPOLossFn": _dpo,
    "trinity.trainer.verl.losses.TrinityPolicyLoss": _trinity_policy_loss,
    "trinity.trainer.verl.config.group_micro_batch_size": lambda m: _overlay_code(m.group_micro_batch_size),
    "trinity.trainer.verl.trainer.VERLTrainer": lambda m: _overlay_code(vars(m.VERLTrainer)["_update_actor"]),
    # veRL's register decorator wraps it: the overlay replaces the code of the function it wraps
    "trinity.trainer.verl.workers.TrinityActorRolloutRefWorker": lambda m: _overlay_code(
        inspect.unwrap(vars(m.TrinityActorRolloutRefWorker)["set_trinity_config"])
    ),
    "trinity.common.config.TrainerConfig": _switch_unset,
    "trinity.algorithm.algorithm.DPOAlgorithm": lambda m: _overlay_code(vars(m.DPOAlgorithm)["check_config"].__func__),
    # and the trainer's validator resolves the switch first (0010)
    "trinity.common.config_validator.validators": lambda m: any(
        type(item).__name__ == "PolicyLossGroupValidator" and _overlay_code(type(item).validate)
        for item in m.validators
    )
    and _overlay_code(vars(m.TrainerConfigValidator)["validate"]),
}


def probe(*modules: str) -> dict:
    """What the overlays did to the targets of the imported modules (``targets``), the targets this release has no
    piece for (``elsewhere``: a check that says None), and each piece's state."""
    for name in modules:
        importlib.import_module(name)
    seen, elsewhere = {}, []
    for label, check in PROBES.items():
        module_name = label.rsplit(".", 1)[0]
        if module_name in sys.modules:
            fixed = check(sys.modules[module_name])
            if fixed is None:
                elsewhere.append(label)
            else:
                seen[label] = bool(fixed)
    from patchset_overlay.status import collect

    states = {piece["piece"]: piece["state"] for entry in collect(import_upstreams=False) for piece in entry["pieces"]}
    return {"targets": seen, "elsewhere": elsewhere, "pieces": states}


def loaded() -> dict:
    owned = ("verl", "trinity", "verl_overlay", "trinity_overlay", "patchset_overlay", "hydra", "hydra_plugins")
    owned += ("patchset_overlay_registry", "omegaconf")
    return {
        "owned": sorted(name for name in sys.modules if name.split(".", 1)[0] in owned),
        "torch": "torch" in sys.modules,
    }


def compose(config_name: str, model_dir: str) -> dict:
    import importlib.util

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    verl_root = Path(next(iter(importlib.util.find_spec("verl").submodule_search_locations)))
    overrides = [f"critic.model.path={model_dir}", "critic.ppo_micro_batch_size_per_gpu=2"]
    with initialize_config_dir(config_dir=str(verl_root / "trainer" / "config"), version_base=None):
        config = hydra_compose(config_name=config_name, overrides=overrides)
    from verl.utils.config import omega_conf_to_dataclass

    critic = omega_conf_to_dataclass(config.critic)
    return {
        "class": type(critic).__name__,
        "composed": "loss_scale_factor" in config.critic,
        "field": hasattr(critic, "loss_scale_factor"),
    }


def main(argv: list[str]) -> int:
    case, *rest = argv
    at_start = loaded()
    print(json.dumps({**{"probe": probe, "compose": compose}[case](*rest), "at start": at_start}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
