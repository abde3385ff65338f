"""How piece 0001 (the critic fix) goes onto verl's modules, and how to tell that verl already has it."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from types import ModuleType


def upstream_has_critic_fix(modules: Mapping[str, ModuleType]) -> str | None:
    """verl's compute_value_loss already takes batch_num_tokens (verl >= 0.9.0, or a patched checkout)."""
    function = modules["verl.trainer.ppo.core_algos"].compute_value_loss
    if "batch_num_tokens" in inspect.signature(function).parameters:
        return "already has the critic fix (compute_value_loss takes batch_num_tokens)"
    return None


def install_critic_fix(modules: Mapping[str, ModuleType], undo: list[Callable[[], None]]) -> None:
    """Add CriticConfig.loss_scale_factor, then give compute_value_loss and value_loss the patched code."""
    from patchset_overlay.replace import add_dataclass_field, replace_function_code
    from verl_overlay.trainer.ppo import core_algos
    from verl_overlay.workers.config import critic
    from verl_overlay.workers.utils import losses

    undo.append(
        add_dataclass_field(
            modules["verl.workers.config.critic"].CriticConfig,
            critic.FIELD_NAME,
            critic.FIELD_TYPE,
            critic.FIELD_DEFAULT,
            after=critic.FIELD_AFTER,
            doc_line=critic.FIELD_DOC,
        )
    )
    undo.append(
        replace_function_code(modules["verl.trainer.ppo.core_algos"].compute_value_loss, core_algos.compute_value_loss)
    )
    undo.append(replace_function_code(modules["verl.workers.utils.losses"].value_loss, losses.value_loss))
