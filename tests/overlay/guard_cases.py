"""One guard case per run, in a process of the overlay venv with the overlays switched on automatically.

``python guard_cases.py CASE UPSTREAMS`` (UPSTREAMS: ``verl`` or ``verl,trinity``; CASE only names the case: the
changed, patched or released trees it needs come in through PYTHONPATH, set by the test) imports the upstream
modules, which fires the overlays' import hooks, and prints one JSON line: the overlay warnings raised, the status
report, and whether the upstream objects are still upstream's own.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import warnings
from pathlib import Path


def _from_upstream(obj, package: str) -> bool:
    root = Path(sys.modules[package].__file__).resolve().parent
    return Path(inspect.getsourcefile(obj)).resolve().is_relative_to(root)


def _absent_or_upstreams(module, name: str, package: str) -> bool:
    """A function a patch adds: not there at all, or the upstream's own (a patched checkout defines it)."""
    return name not in vars(module) or _from_upstream(vars(module)[name], package)


def _own_field(cls, name: str) -> bool:
    """No dataclass field ``name`` added by an overlay: none at all, or the one upstream's own source declares."""
    return name not in {f.name for f in dataclasses.fields(cls)} or name in inspect.getsource(cls)


def untouched() -> dict[str, bool]:
    """Each replaced object is still the upstream's own code (its source file is in the upstream package); a fix
    names the keys of its piece's objects in ``guard`` of its series' parts.toml (test_fix_completeness.py)."""
    import verl.trainer.config.algorithm as algorithm
    import verl.trainer.distillation.losses as distillation
    import verl.trainer.ppo.core_algos as core_algos
    import verl.trainer.ppo.rollout_corr_helper as rollout_corr
    import verl.workers.config.actor as actor
    import verl.workers.config.critic as critic
    import verl.workers.utils.losses as losses

    seen = {
        "compute_value_loss": _from_upstream(core_algos.compute_value_loss, "verl"),
        "compute_policy_loss_geo_mean": _from_upstream(core_algos.compute_policy_loss_geo_mean, "verl"),
        "distillation_loss": _from_upstream(distillation.distillation_loss, "verl"),
        "value_loss": _from_upstream(losses.value_loss, "verl"),
        "CriticConfig": _own_field(critic.CriticConfig, "loss_scale_factor"),
        # the mini-batch statistics (verl 0004 to 0008; verl-0.7 0003, 0004)
        "get_mini_batch_hook": _absent_or_upstreams(core_algos, "get_mini_batch_hook", "verl"),
        "compute_clip_cov_mask": _absent_or_upstreams(core_algos, "compute_clip_cov_mask", "verl"),
        "RolloutCorrectionConfig": _own_field(
            algorithm.RolloutCorrectionConfig, "rollout_is_batch_normalize_mini_batch"
        ),
        "compute_policy_loss_kl_cov": _from_upstream(core_algos.compute_policy_loss_kl_cov, "verl"),
        "compute_policy_loss_clip_cov": _from_upstream(core_algos.compute_policy_loss_clip_cov, "verl"),
        "compute_policy_loss_bypass_mode": _from_upstream(core_algos.compute_policy_loss_bypass_mode, "verl"),
        "compute_kl_cov_mask": _absent_or_upstreams(core_algos, "compute_kl_cov_mask", "verl"),
        "compute_rollout_correction_weights": _from_upstream(rollout_corr.compute_rollout_correction_weights, "verl"),
        "compute_rollout_is_batch_mean": _absent_or_upstreams(rollout_corr, "compute_rollout_is_batch_mean", "verl"),
        "ppo_loss": _from_upstream(losses.ppo_loss, "verl"),
        "ActorConfig": _own_field(actor.ActorConfig, "policy_loss_inputs"),
    }
    engine_workers = sys.modules.get("verl.workers.engine_workers")
    if engine_workers is not None:
        worker = engine_workers.TrainingWorker
        seen["TrainingWorker"] = all(
            _from_upstream(inspect.unwrap(vars(worker)[name]), "verl") for name in ("train_batch", "train_mini_batch")
        ) and _absent_or_upstreams(worker, "_run_mini_batch_hooks", "verl")
        init_model = inspect.unwrap(vars(engine_workers.ActorRolloutRefWorker)["init_model"])
        seen["ActorRolloutRefWorker.init_model"] = _from_upstream(init_model, "verl")
    trinity_losses = sys.modules.get("trinity.trainer.verl.losses")
    if trinity_losses is not None:
        seen["TrinityPolicyLoss.__call__"] = _from_upstream(trinity_losses.TrinityPolicyLoss.__call__, "trinity")
        seen["TrinityPolicyLoss.__init__"] = _from_upstream(trinity_losses.TrinityPolicyLoss.__init__, "trinity")
        base = sys.modules["trinity.algorithm.policy_loss_fn.policy_loss_fn"].PolicyLossFn
        added = {"loss_aggregation", "group_size"} & vars(base).keys()
        seen["PolicyLossFn"] = not added or all(name in inspect.getsource(base) for name in added)
    dpo = sys.modules.get("trinity.algorithm.policy_loss_fn.dpo_loss")
    if dpo is not None:  # the function Trinity's PolicyLossFnMeta wraps
        wrapped = vars(dpo.DPOLossFn)["__call__"].__closure__[0].cell_contents
        seen["DPOLossFn.__call__"] = _from_upstream(wrapped, "trinity")
    validators = sys.modules.get("trinity.common.config_validator")
    if validators is not None:
        seen["TrainerConfigValidator.validate"] = _from_upstream(validators.TrainerConfigValidator.validate, "trinity")
        # the validators list, where the patches add PolicyLossGroupValidator after TrainerConfigValidator: none there,
        # or the upstream's own (a patched checkout)
        listed = validators.validators
        seen["TrainerConfigValidator.validators"] = all(_from_upstream(type(item), "trinity") for item in listed)
    algorithms = sys.modules.get("trinity.algorithm.algorithm")
    if algorithms is not None:
        check_config = vars(algorithms.DPOAlgorithm)["check_config"].__func__
        seen["DPOAlgorithm.check_config"] = _from_upstream(check_config, "trinity")
    trainer = sys.modules.get("trinity.trainer.verl.trainer")
    if trainer is not None:
        update_actor = inspect.unwrap(vars(trainer.VERLTrainer)["_update_actor"])
        seen["VERLTrainer._update_actor"] = _from_upstream(update_actor, "trinity")
    return seen


def critic_yaml_composes_loss_scale_factor() -> bool:
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = Path(verl.__file__).resolve().parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return "loss_scale_factor" in compose(config_name="ppo_trainer").critic


def main(case: str, upstreams: str) -> int:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if "trinity" in upstreams.split(","):  # Trinity's import is the slow one: only where the case needs it
            import trinity.algorithm.algorithm  # noqa: F401
            import trinity.algorithm.policy_loss_fn.dpo_loss  # noqa: F401  (the registry imports it lazily)
            import trinity.common.config_validator  # noqa: F401
            import trinity.trainer.verl.losses  # noqa: F401
            import trinity.trainer.verl.trainer  # noqa: F401
        import verl.workers.utils.losses  # noqa: F401

        composes = critic_yaml_composes_loss_scale_factor()
        from patchset_overlay.status import collect, render

        report = collect(import_upstreams=False)
    overlay_warnings = [str(w.message) for w in caught if type(w.message).__name__ == "OverlayWarning"]
    print(render(report), file=sys.stderr)
    print(
        json.dumps(
            {
                "warnings": overlay_warnings,
                "status": report,
                "untouched": untouched(),
                "critic_yaml_composes_loss_scale_factor": composes,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2]))
