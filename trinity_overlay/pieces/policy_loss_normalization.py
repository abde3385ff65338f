"""The policy-loss normalization piece (patches 0001, 0003, 0005, 0009): its targets, how to tell a tree has it, and
how it goes onto each of Trinity's modules.

With ``trainer.fix_actor_microbatch_loss_scale`` on (passed by `VERLTrainer.prepare` and the worker's
`set_trinity_config` to `build_trinity_loss`), `TrinityPolicyLoss` weights each term by its share of the global
mini-batch, reading the engine's batch info strictly; each policy loss declares its `loss_aggregation` (a loss that
takes the engine's batch info as runtime keys normalizes itself, and `PolicyLossFnMeta` passes those keys through);
MIX / MIX_CHORD warn at start-up. The patched code is in the mirrored
modules (``trinity_overlay/algorithm/policy_loss_fn/...``, ``trinity_overlay/trainer/verl/losses.py``), which keep
Trinity's layout. Each installer is safe on its own: `loss_aggregation` is a new attribute no upstream code reads, and
`TrinityPolicyLoss` reads it only from losses built through Trinity's registry, whose base class module Trinity's
losses module imports (and so this overlay changes) first.
"""

from __future__ import annotations

from collections.abc import Callable
from types import FunctionType, ModuleType

from patchset_overlay.source import UpstreamSource
from patchset_overlay.spec import Piece, Target

POLICY_LOSS_FN = "trinity.algorithm.policy_loss_fn.policy_loss_fn"
DPO_LOSS = "trinity.algorithm.policy_loss_fn.dpo_loss"
REC_LOSS = "trinity.algorithm.policy_loss_fn.rec_policy_loss"
MIX_LOSS = "trinity.algorithm.policy_loss_fn.mix_policy_loss"
CHORD_LOSS = "trinity.algorithm.policy_loss_fn.chord_policy_loss"
LOSSES = "trinity.trainer.verl.losses"
WORKERS = "trinity.trainer.verl.workers"
TRAINER = "trinity.trainer.verl.trainer"

# the class of each module that declares its own `loss_aggregation`
DECLARING_CLASSES = {
    POLICY_LOSS_FN: "PolicyLossFn",
    REC_LOSS: "RECPolicyLossFn",
    MIX_LOSS: "MIXPolicyLossFn",
    CHORD_LOSS: "MIXCHORDPolicyLossFn",
    DPO_LOSS: "DPOLossFn",
}
PATCHED_MEMBERS = ("__call__", "_micro_batch_weight")


def upstream_has_policy_loss_fix(source: UpstreamSource) -> str | None:
    """Trinity already weights each policy-loss term by its share of the mini-batch (all three patches' marks)."""
    policy_loss = source.segment(LOSSES, "TrinityPolicyLoss")
    if (
        "_micro_batch_weight" in policy_loss
        and "micro-batch-weighted" in policy_loss
        and "fix_actor_microbatch_loss_scale" in policy_loss
        and "self-normalized" in source.segment(POLICY_LOSS_FN, "PolicyLossFn")
        and "fix_actor_microbatch_loss_scale" in source.segment(WORKERS, "TrinityActorRolloutRefWorker")
    ):
        return "already has the policy-loss fix (TrinityPolicyLoss._micro_batch_weight, PolicyLossFn.loss_aggregation)"
    return None


def install_policy_loss_fn(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """The base class's `loss_aggregation`, and the metaclass's ``__new__`` with the runtime keys: loss classes made
    from now on neither select them from the batch nor drop them from the trainer's call."""
    from patchset_overlay.replace import set_class_attributes
    from trinity_overlay.algorithm.policy_loss_fn import policy_loss_fn

    install_loss_aggregation(module, undo)
    mirror_new = vars(policy_loss_fn.PolicyLossFnMeta)["__new__"]
    undo.append(set_class_attributes(module.PolicyLossFnMeta, {"__new__": mirror_new}))


def install_loss_aggregation(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """Declare how the module's loss aggregates a batch, on the upstream class itself."""
    from importlib import import_module

    from patchset_overlay.replace import set_class_attributes

    name = DECLARING_CLASSES[module.__name__]
    mirror = import_module("trinity_overlay" + module.__name__.removeprefix("trinity"))
    declared = vars(getattr(mirror, name))["loss_aggregation"]
    undo.append(set_class_attributes(getattr(module, name), {"loss_aggregation": declared}))


def install_trinity_policy_loss(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """Give TrinityPolicyLoss the patched `__call__` and `_micro_batch_weight`, and its `__init__` and
    `build_trinity_loss` the patched code (run in Trinity's module, which gets ``get_logger`` as the patch imports
    it, and `engine_batch_info`): both take `fix_actor_microbatch_loss_scale`."""
    from trinity.utils.log import get_logger

    from patchset_overlay.replace import add_module_globals, replace_function_code, set_class_attributes
    from trinity_overlay.trainer.verl import losses

    mirror = vars(losses.TrinityPolicyLoss)
    undo.append(add_module_globals(module, {"get_logger": get_logger, "engine_batch_info": losses.engine_batch_info}))
    undo.append(set_class_attributes(module.TrinityPolicyLoss, {name: mirror[name] for name in PATCHED_MEMBERS}))
    undo.append(replace_function_code(vars(module.TrinityPolicyLoss)["__init__"], mirror["__init__"]))
    # build_trinity_loss builds Trinity's own TrinityPolicyLoss: the mirror's code, bound to Trinity's module
    builder = losses.build_trinity_loss
    bound = FunctionType(builder.__code__, vars(module), builder.__name__, builder.__defaults__)
    bound.__doc__, bound.__annotations__ = builder.__doc__, builder.__annotations__
    undo.append(replace_function_code(module.build_trinity_loss, bound))


def install_worker(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """`set_trinity_config` takes the switch and builds the loss with it: the patched code replaces that of the
    function veRL's ``register`` decorator wraps (the wrappers, and their dispatch attributes, stay)."""
    import inspect

    from patchset_overlay.replace import replace_function_code
    from trinity_overlay.trainer.verl import workers

    for name in workers.PATCHED_METHODS:
        target = inspect.unwrap(vars(module.TrinityActorRolloutRefWorker)[name])
        undo.append(replace_function_code(target, vars(workers.TrinityActorRolloutRefWorker)[name]))


def install_prepare(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """`VERLTrainer.prepare` passes the trainer's switch to the actor workers (the patched code, in Trinity's
    module)."""
    from patchset_overlay.replace import replace_function_code
    from trinity_overlay.trainer.verl import trainer

    for name in trainer.SWITCH_METHODS:
        undo.append(replace_function_code(vars(module.VERLTrainer)[name], vars(trainer.VERLTrainer)[name]))


PIECE = Piece(
    name="policy-loss-normalization",
    patches=(
        "0001-trainer-policy-loss-global-normalization",
        "0003-trainer-weight-each-trinitypolicyloss-term-its-own",
        "0005-trainer-warn-start-up-that-mix-mix-chord-depend",
        "0009-trainer-policy-loss-runtime-keys",
    ),
    targets=(
        Target(POLICY_LOSS_FN, "PolicyLossFn"),
        Target(POLICY_LOSS_FN, "PolicyLossFnMeta"),
        Target(REC_LOSS, "RECPolicyLossFn"),
        Target(MIX_LOSS, "MIXPolicyLossFn"),
        Target(CHORD_LOSS, "MIXCHORDPolicyLossFn"),
        Target(DPO_LOSS, "DPOLossFn"),
        Target(LOSSES, "TrinityPolicyLoss"),
        Target(LOSSES, "build_trinity_loss"),
        Target(WORKERS, "TrinityActorRolloutRefWorker"),
        Target(TRAINER, "VERLTrainer"),
    ),
    installers={
        POLICY_LOSS_FN: install_policy_loss_fn,
        REC_LOSS: install_loss_aggregation,
        MIX_LOSS: install_loss_aggregation,
        CHORD_LOSS: install_loss_aggregation,
        DPO_LOSS: install_loss_aggregation,
        LOSSES: install_trinity_policy_loss,
        WORKERS: install_worker,
        TRAINER: install_prepare,
    },
    upstream_has_fix=upstream_has_policy_loss_fix,
)
