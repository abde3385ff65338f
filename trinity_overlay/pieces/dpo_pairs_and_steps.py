"""The DPO piece (patches 0002, 0004, 0006, 0007; 0008): its targets, how to tell a tree has it, what keeps it off
(verl < 0.8 beside Trinity), and how it goes onto each of Trinity's modules.

One DPO logit per chosen/rejected pair, pairs kept in one micro-batch (`group_size`, passed by
`VERLTrainer._update_actor` as ``force_group_size``), and one optimizer step per training step (the mini-batch
counted in rows), on verl's engine path. Mirrored (in ``trinity_overlay/algorithm/...`` and
``trinity_overlay/trainer/verl/trainer.py``, ``trinity_overlay/common/config_validator.py``, which keep Trinity's
layout): the DPO loss (a batch that is not whole pairs refused), `group_size`, the veRL trainer (engine path), and
the configuration-time checks: ``actor.shuffle`` refused in either layout of ``trainer_config`` and on a built
``veRLConfig``, and whole pairs on each GPU with the warning that a fixed micro-batch size counts pairs
(`PolicyLossGroupValidator`). Not mirrored: the legacy actors' changes (0006's pair grouping, 0007's legacy config
translation, and 0008's weights and its warning about the flag in the legacy config translation): beside verl < 0.8
the piece stays off and says so.

Each installer is safe on its own: `group_size` is a new attribute that only the patched `VERLTrainer` reads,
through Trinity's registry, whose base class module Trinity's trainer imports (and so this overlay changes) first.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from patchset_overlay.guard import version_tuple
from patchset_overlay.source import SourceError, UpstreamSource
from patchset_overlay.spec import Piece, Target

POLICY_LOSS_FN = "trinity.algorithm.policy_loss_fn.policy_loss_fn"
DPO_LOSS = "trinity.algorithm.policy_loss_fn.dpo_loss"
TRAINER = "trinity.trainer.verl.trainer"
ALGORITHM = "trinity.algorithm.algorithm"
CONFIG_VALIDATOR = "trinity.common.config_validator"


def _defines(source: UpstreamSource, module: str, name: str) -> bool:
    try:
        source.segment(module, name)
    except SourceError:
        return False
    return True


def upstream_has_dpo_fix(source: UpstreamSource) -> str | None:
    """Trinity's DPO already sums each response on its own, keeps pairs whole and counts its steps in pairs."""
    if (
        "axis=-1" in source.segment(DPO_LOSS, "DPOLossFn")
        and "group_size" in source.segment(POLICY_LOSS_FN, "PolicyLossFn")
        and "force_group_size" in source.segment(TRAINER, "VERLTrainer")
        and "shuffle" in source.segment(ALGORITHM, "DPOAlgorithm")
        and _defines(source, CONFIG_VALIDATOR, "PolicyLossGroupValidator")
    ):
        return "already has the DPO fixes (DPOLossFn sums each response with axis=-1; PolicyLossFn.group_size)"
    return None


def beside_legacy_verl(source: UpstreamSource) -> str | None:
    """Beside verl < 0.8 Trinity trains DPO through its legacy actor, whose split the overlay does not change: the
    per-pair logits there would meet micro-batches that cut pairs. The patched wheel or checkout covers that path."""
    verl = UpstreamSource.find("verl")
    version = verl.version() if verl is not None else None
    if version is not None and version_tuple(version) < (0, 8):
        return (
            f"beside verl {version} Trinity trains through its legacy actors, whose changes (0006, 0007, 0008: DPO "
            "pairs, DPO optimizer steps, micro-batch weights) this overlay does not mirror (use the patched wheel "
            "or checkout there)"
        )
    return None


def install_group_size(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    from patchset_overlay.replace import set_class_attributes
    from trinity_overlay.algorithm.policy_loss_fn import policy_loss_fn

    undo.append(set_class_attributes(module.PolicyLossFn, {"group_size": policy_loss_fn.PolicyLossFn.group_size}))


def install_dpo_loss(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """`group_size` 2 on DPOLossFn, and the patched code for the `__call__` Trinity's PolicyLossFnMeta wraps (the
    wrapper stays as it is)."""
    from patchset_overlay.replace import decorated_function, replace_function_code, set_class_attributes
    from trinity_overlay.algorithm.policy_loss_fn import dpo_loss

    mirror = dpo_loss.DPOLossFn
    undo.append(set_class_attributes(module.DPOLossFn, {"group_size": mirror.group_size}))
    wrapped = decorated_function(vars(module.DPOLossFn)["__call__"])
    undo.append(replace_function_code(wrapped, vars(mirror)["__call__"]))


def install_verl_trainer(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """`VERLTrainer._update_actor` gets the patched code (run in Trinity's module, which gets ``POLICY_LOSS_FN`` as
    the patch imports it)."""
    from patchset_overlay.replace import add_module_globals, replace_function_code, set_class_attributes
    from trinity_overlay.trainer.verl import trainer

    mirror = vars(trainer.VERLTrainer)
    undo.append(add_module_globals(module, trainer.ADDED_GLOBALS))
    undo.append(set_class_attributes(module.VERLTrainer, {name: mirror[name] for name in trainer.ADDED_METHODS}))
    for name in trainer.PATCHED_METHODS:
        undo.append(replace_function_code(vars(module.VERLTrainer)[name], mirror[name]))


def install_group_validator(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """`PolicyLossGroupValidator` added to Trinity's module, and its instance to ``validators`` right after the
    trainer's validator, as the patch lists it (0004: DPO pairs whole on each GPU, and the micro-batch warning)."""
    from patchset_overlay.replace import ReplaceError, add_module_globals
    from trinity_overlay.common import config_validator

    validator_class = config_validator.PolicyLossGroupValidator
    validators = module.validators
    after = [index for index, item in enumerate(validators) if type(item) is module.TrainerConfigValidator]
    if len(after) != 1:
        raise ReplaceError(f"{module.__name__}.validators does not hold one TrainerConfigValidator")
    undo.append(add_module_globals(module, {"PolicyLossGroupValidator": validator_class}))
    instance = validator_class()
    validators.insert(after[0] + 1, instance)

    def remove() -> None:
        validators[:] = [item for item in validators if item is not instance]

    undo.append(remove)


def install_dpo_algorithm(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """`DPOAlgorithm.check_config` gets the patched code (the classmethod's function, in Trinity's module)."""
    from patchset_overlay.replace import replace_function_code
    from trinity_overlay.algorithm import algorithm

    target = vars(module.DPOAlgorithm)["check_config"].__func__
    undo.append(replace_function_code(target, vars(algorithm.DPOAlgorithm)["check_config"].__func__))


PIECE = Piece(
    name="dpo-pairs-and-steps",
    patches=(
        "0002-algorithm-fix-dpo-compute-one-logit-per-chosen",
        "0004-trainer-keep-dpo-pairs-one-micro-batch-under-verl",
        "0006-trainer-keep-dpo-pairs-whole-legacy-actors",
        "0007-trainer-make-one-dpo-training-step-one-optimizer",
        # the legacy actors' weights: nothing to mirror on verl's engine path, where this piece is active; beside
        # verl < 0.8, where those actors run, the piece stays off and says that it does not mirror them
        "0008-trainer-weight-each-legacy-micro-batch-loss-term",
    ),
    targets=(
        Target(POLICY_LOSS_FN, "PolicyLossFn"),
        Target(DPO_LOSS, "DPOLossFn"),
        Target(TRAINER, "VERLTrainer"),
        Target(ALGORITHM, "DPOAlgorithm"),
        Target(CONFIG_VALIDATOR, "TrainerConfigValidator"),
    ),
    installers={
        POLICY_LOSS_FN: install_group_size,
        DPO_LOSS: install_dpo_loss,
        TRAINER: install_verl_trainer,
        ALGORITHM: install_dpo_algorithm,
        CONFIG_VALIDATOR: install_group_validator,
    },
    upstream_has_fix=upstream_has_dpo_fix,
    unfit=beside_legacy_verl,
)
