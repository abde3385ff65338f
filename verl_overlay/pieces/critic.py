"""Piece 0001, the critic fix: its targets, the release that has it, how to tell a tree has it, and its installers.

Each installer is safe on its own: the new ``compute_value_loss`` keyword arguments default to the old behaviour,
``CriticConfig.loss_scale_factor`` defaults to None, and the new ``value_loss`` is installed only where the
``compute_value_loss`` it calls takes the new arguments (verl's losses module imports core_algos, which this piece
has changed by then; the installer checks rather than assumes it). The patched code is in the mirrored modules
(``verl_overlay/trainer/ppo/core_algos.py``, ``workers/config/critic.py``, ``workers/utils/losses.py``), which keep
verl's layout; the critic YAML's part is `verl_overlay.pieces.critic_yaml`.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from patchset_overlay.spec import Piece, Target, code_from, source_has

CORE_ALGOS = "verl.trainer.ppo.core_algos"
CRITIC_CONFIG = "verl.workers.config.critic"
LOSSES = "verl.workers.utils.losses"

# verl's compute_value_loss already takes batch_num_tokens (verl >= 0.9.0, or a patched checkout)
upstream_has_critic_fix = source_has(
    CORE_ALGOS,
    "compute_value_loss",
    "batch_num_tokens",
    "already has the critic fix (compute_value_loss takes batch_num_tokens)",
)
install_compute_value_loss = code_from("verl_overlay.trainer.ppo.core_algos", "compute_value_loss")


def install_loss_scale_factor(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """Add the field to CriticConfig and to each of its dataclass subclasses (FSDP, Megatron, ...)."""
    from patchset_overlay.replace import add_dataclass_field
    from verl_overlay.workers.config import critic

    undo.append(
        add_dataclass_field(
            module.CriticConfig,
            critic.FIELD_NAME,
            critic.FIELD_TYPE,
            critic.FIELD_DEFAULT,
            after=critic.FIELD_AFTER,
            doc_line=critic.FIELD_DOC,
        )
    )


def value_loss_installer(mirror: str) -> Callable[[ModuleType, list[Callable[[], None]]], None]:
    """The installer of the patched value_loss of ``verl_overlay.workers.utils.<mirror>`` (each release's
    ``value_loss`` has its own mirror). The new value_loss passes the global-batch arguments to the
    compute_value_loss its module holds: refuse (the whole piece comes out) rather than assume that one was changed
    first."""

    def install_value_loss(module: ModuleType, undo: list[Callable[[], None]]) -> None:
        import importlib
        import inspect

        from patchset_overlay.replace import ReplaceError, replace_function_code

        patched = importlib.import_module(f"verl_overlay.workers.utils.{mirror}")
        if "batch_num_tokens" not in inspect.signature(module.compute_value_loss).parameters:
            raise ReplaceError(f"{module.__name__}.compute_value_loss does not take batch_num_tokens")
        undo.append(replace_function_code(module.value_loss, patched.value_loss))

    return install_value_loss


install_value_loss = value_loss_installer("losses")


PIECE = Piece(
    name="0001-trainer-critic-value-loss-global-normalization",
    patches=("0001-trainer-critic-value-loss-global-normalization",),
    targets=(
        Target(CORE_ALGOS, "compute_value_loss"),
        Target(CRITIC_CONFIG, "CriticConfig"),
        Target(LOSSES, "value_loss"),
    ),
    installers={
        CORE_ALGOS: install_compute_value_loss,
        CRITIC_CONFIG: install_loss_scale_factor,
        LOSSES: install_value_loss,
    },
    upstream_has_fix=upstream_has_critic_fix,
    fixed_since="0.9.0",
    releases=("0.8.0", "0.9.1"),  # verl 0.7.1: critic_v0_7
)
