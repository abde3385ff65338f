"""How piece 0001 (the critic fix) goes onto each of verl's modules, and how to tell that verl already has it.

Each installer is safe on its own: the new ``compute_value_loss`` keyword arguments default to the old behaviour,
``CriticConfig.loss_scale_factor`` defaults to None, and the new ``value_loss`` is installed only where the
``compute_value_loss`` it calls takes the new arguments (verl's losses module imports core_algos, which this piece
has changed by then; the installer checks rather than assumes it).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from patchset_overlay.source import UpstreamSource
from verl_overlay._modules import CORE_ALGOS


def upstream_has_critic_fix(source: UpstreamSource) -> str | None:
    """verl's compute_value_loss already takes batch_num_tokens (verl >= 0.9.0, or a patched checkout)."""
    if "batch_num_tokens" in source.segment(CORE_ALGOS, "compute_value_loss"):
        return "already has the critic fix (compute_value_loss takes batch_num_tokens)"
    return None


def install_compute_value_loss(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    from patchset_overlay.replace import replace_function_code
    from verl_overlay.trainer.ppo import core_algos

    undo.append(replace_function_code(module.compute_value_loss, core_algos.compute_value_loss))


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


def install_value_loss(module: ModuleType, undo: list[Callable[[], None]]) -> None:
    """The new value_loss passes the global-batch arguments to the compute_value_loss its module holds: refuse
    (the whole piece comes out) rather than assume that one was changed first."""
    import inspect

    from patchset_overlay.replace import ReplaceError, replace_function_code
    from verl_overlay.workers.utils import losses

    if "batch_num_tokens" not in inspect.signature(module.compute_value_loss).parameters:
        raise ReplaceError(f"{module.__name__}.compute_value_loss does not take batch_num_tokens")
    undo.append(replace_function_code(module.value_loss, losses.value_loss))
