"""Pieces 0004 and 0005 on verl 0.8.0, the statistics chosen over the optimizer mini-batch: KL-Cov's and Clip-Cov's
tokens (0004) and bypass mode's IS mean (0005), computed by the engine worker before the split and handed to each
micro-batch's loss. One piece for both: 0005 builds on 0004 (the same ``policy_loss_inputs``, ``ppo_loss``,
``train_batch`` and ``init_model``). Its targets, how to tell a tree has it, and its installers; verl 0.9.1 takes
`verl_overlay.pieces.mini_batch_statistics_v0_9`, the same with 0.9.1's ``train_mini_batch`` and ``init_model``
(those two differ between the releases; every other target is the same code, and each release's fingerprints say so).

Each installer is safe on its own: the losses choose within their call as upstream does when no mask or mean is
handed to them, ``policy_loss_inputs`` defaults to an empty dict, and the worker attributes default to "none asked
for". The installers that call what another one adds check that it is there (``ppo_loss`` fills
``ActorConfig.policy_loss_inputs``; the worker calls the selection functions): where it is not, the whole piece comes
out. The patched code is in the mirrored modules (``verl_overlay/trainer/ppo/core_algos.py``,
``rollout_corr_helper.py``, ``workers/config/actor.py``, ``workers/utils/losses.py``, ``workers/engine_workers.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from patchset_overlay.source import SourceError, UpstreamSource
from patchset_overlay.spec import Installer, Piece, Target

CORE_ALGOS = "verl.trainer.ppo.core_algos"
ROLLOUT_CORR = "verl.trainer.ppo.rollout_corr_helper"
ACTOR_CONFIG = "verl.workers.config.actor"
LOSSES = "verl.workers.utils.losses"
ENGINE_WORKERS = "verl.workers.engine_workers"

CHANGED_LOSSES = ("compute_policy_loss_clip_cov", "compute_policy_loss_kl_cov", "compute_policy_loss_bypass_mode")
CHANGED_IS_HELPERS = ("compute_rollout_correction_weights", "compute_rollout_correction_and_rejection_mask")
Undo = list[Callable[[], None]]


def upstream_has_fix(source: UpstreamSource) -> str | None:
    """verl already takes the mini-batch's choice and mean (both patches' marks: a patched checkout). A release without
    these functions (older than the losses) has not: the guard then refuses it by its version or fingerprints."""
    try:
        kl_cov = source.segment(CORE_ALGOS, "compute_policy_loss_kl_cov")
        weights = source.segment(ROLLOUT_CORR, "compute_rollout_correction_weights")
    except SourceError:
        return None
    if "kl_cov_mask" in kl_cov and "rollout_is_batch_mean" in weights:
        return (
            "already has the mini-batch statistics (compute_policy_loss_kl_cov reads kl_cov_mask; "
            "compute_rollout_correction_weights takes rollout_is_batch_mean)"
        )
    return None


def _first_defining(mirrors: list[Any], name: str) -> Any:
    """``name`` of the first of ``mirrors`` (modules, or their ``...Members`` classes) that defines it: a release's
    mirror holds what differs on that release, the common mirror (last) the rest."""
    return next(vars(mirror)[name] for mirror in mirrors if name in vars(mirror))


def _replace_and_add(module: ModuleType, mirror_names: tuple[str, ...], replaced: tuple[str, ...], undo: Undo) -> None:
    """The functions the patch adds to ``module`` (the mirrors' ``ADDED_FUNCTIONS``), bound to its namespace (where
    the functions they call, added or changed, are upstream's objects with the mirror's code), then the patched code
    of those it changes; each from the first of the mirrors that defines it."""
    from patchset_overlay.replace import add_module_globals, bound_to, replace_function_code

    mirrors = [importlib.import_module(name) for name in mirror_names]
    added = _first_defining(mirrors, "ADDED_FUNCTIONS")
    patched = (*added, *replaced)
    functions = {name: bound_to(module, _first_defining(mirrors, name), new=patched) for name in added}
    undo.append(add_module_globals(module, functions))
    for name in replaced:
        undo.append(replace_function_code(getattr(module, name), _first_defining(mirrors, name), new=patched))


def install_core_algos(module: ModuleType, undo: Undo) -> None:
    """compute_kl_cov_mask, compute_clip_cov_mask (and their helpers), and the three losses that take their part (the
    same code on 0.7.1, 0.8.0 and 0.9.1)."""
    _replace_and_add(module, ("verl_overlay.trainer.ppo.core_algos",), CHANGED_LOSSES, undo)


def rollout_corr_installer(release_mirror: str) -> Installer:
    """The installer of compute_rollout_is_batch_mean and the IS weights that take it, each from the release's mirror
    (``verl_overlay.trainer.ppo.<release_mirror>``) where it has it, else from the common one (0.8.0's)."""
    names = (f"verl_overlay.trainer.ppo.{release_mirror}", "verl_overlay.trainer.ppo.rollout_corr_helper")

    def install_rollout_corr(module: ModuleType, undo: Undo) -> None:
        _replace_and_add(module, names, CHANGED_IS_HELPERS, undo)

    return install_rollout_corr


def install_policy_loss_inputs(module: ModuleType, undo: Undo) -> None:
    """Add the field to ActorConfig and to each of its dataclass subclasses (FSDP, Megatron, ...)."""
    from patchset_overlay.replace import add_dataclass_field
    from verl_overlay.workers.config import actor

    field = actor.field_default()
    undo.append(add_dataclass_field(module.ActorConfig, actor.FIELD_NAME, actor.FIELD_TYPE, field, actor.FIELD_AFTER))


def ppo_loss_installer(mirror: str) -> Installer:
    """The installer of ``ppo_loss`` with the code of ``verl_overlay.workers.utils.<mirror>``'s. The patched ppo_loss
    fills ``config.policy_loss_inputs``: refuse (the whole piece comes out) rather than assume that the ActorConfig
    its module holds has the field yet."""

    def install_ppo_loss(module: ModuleType, undo: Undo) -> None:
        import dataclasses

        from patchset_overlay.replace import ReplaceError, replace_function_code
        from verl_overlay.workers.config import actor

        if actor.FIELD_NAME not in {field.name for field in dataclasses.fields(module.ActorConfig)}:
            raise ReplaceError(f"{module.__name__}.ActorConfig has no field {actor.FIELD_NAME!r}")
        losses = importlib.import_module(f"verl_overlay.workers.utils.{mirror}")
        undo.append(replace_function_code(module.ppo_loss, losses.ppo_loss))

    return install_ppo_loss


def engine_workers_installer(release_mirror: str) -> Installer:
    """The installer of the engine worker's members, each from the release's mirror
    (``verl_overlay.workers.<release_mirror>``) where it has it, else from the common one
    (`verl_overlay.workers.engine_workers`, 0.8.0's). The mirrors import the selection functions and the IS mean
    from verl's modules: they fail to import (and the whole piece comes out) where those are not there."""

    def install_engine_workers(module: ModuleType, undo: Undo) -> None:
        import inspect

        from patchset_overlay.replace import add_module_globals, bound_to, replace_function_code, set_class_attributes
        from verl_overlay.workers import engine_workers as common

        release = importlib.import_module(f"verl_overlay.workers.{release_mirror}")

        def member(class_name: str, name: str) -> Any:
            return _first_defining([getattr(mirror, f"{class_name}Members") for mirror in (release, common)], name)

        undo.append(add_module_globals(module, common.ADDED_GLOBALS))
        defaults = {name: member("TrainingWorker", name) for name in common.WORKER_DEFAULTS}
        added = {
            name: bound_to(
                module, member("TrainingWorker", name), new=common.ADDED_METHODS, qualname=f"TrainingWorker.{name}"
            )
            for name in common.ADDED_METHODS
        }
        undo.append(set_class_attributes(module.TrainingWorker, {**defaults, **added}))
        for class_name, names in common.REPLACED_METHODS.items():
            for name in names:
                target = inspect.unwrap(vars(getattr(module, class_name))[name])
                undo.append(replace_function_code(target, member(class_name, name)))

    return install_engine_workers


PIECE = Piece(
    name="mini-batch-statistics",
    patches=(
        "0004-algo-select-kl-cov-tokens-over-optimizer-mini",
        "0005-algo-normalize-bypass-is-weights-optimizer-mini",
    ),
    targets=(
        *(Target(CORE_ALGOS, name) for name in CHANGED_LOSSES),
        *(Target(ROLLOUT_CORR, name) for name in CHANGED_IS_HELPERS),
        Target(ACTOR_CONFIG, "ActorConfig"),
        Target(LOSSES, "ppo_loss"),
        Target(ENGINE_WORKERS, "TrainingWorker"),
        Target(ENGINE_WORKERS, "ActorRolloutRefWorker"),
    ),
    installers={
        CORE_ALGOS: install_core_algos,
        ROLLOUT_CORR: rollout_corr_installer("rollout_corr_helper"),
        ACTOR_CONFIG: install_policy_loss_inputs,
        LOSSES: ppo_loss_installer("losses"),
        ENGINE_WORKERS: engine_workers_installer("engine_workers"),
    },
    upstream_has_fix=upstream_has_fix,
    releases=("0.8.0",),  # verl 0.9.1: mini_batch_statistics_v0_9; 0.7.1: mini_batch_statistics_v0_7
)
