"""What the tree's ``TrainingWorker.train_batch`` does to a mini-batch before the engine splits it, for the harness's
runs that call ``engine.train_batch`` themselves: a patched tree's mini-batch hook (verl 0004 to 0007: KL-Cov's or
Clip-Cov's choice, bypass mode's IS mean) with the forward it needs; a vanilla tree has none. That the real worker does
the same, ``test_verl_cov_selection.py`` and ``test_verl_is_batch_norm.py`` check."""

from __future__ import annotations

from typing import Any

# the harness losses whose mini-batch the worker prepares before the split
WORKER_LOSSES = frozenset({"kl_cov", "is_norm"})


def unasked() -> dict[str, Any]:
    """What TrainingWorker.__init__ sets for the mini-batch statistics, none asked for: verl 0004's hooks (verl-0.7
    0003's) and its record of the log-probs it computed."""
    return {"mini_batch_hooks": [], "num_updates": 0, "log_probs_record": None}


def has_mini_batch_hooks() -> bool:
    """Whether the verl tree under test runs a policy loss's hook before each mini-batch (verl 0004)."""
    import verl.trainer.ppo.core_algos as core_algos

    return hasattr(core_algos, "get_mini_batch_hook")


def asked_for(config: Any) -> dict[str, Any]:
    """The attributes ``ActorRolloutRefWorker.init_model`` sets on the actor's ``TrainingWorker`` for the loss of the
    actor ``config``: the loss's mini-batch hook (verl 0004); nothing on a vanilla tree, which has no hooks."""
    if not has_mini_batch_hooks():
        return {}
    from verl.trainer.ppo.core_algos import get_mini_batch_hook

    hook = get_mini_batch_hook(config)
    return {"mini_batch_hooks": [] if hook is None else [hook]}


def worker_on(engine: Any, **fields: Any) -> Any:
    """verl's real ``TrainingWorker``, not initialized, holding ``engine``: the mini-batch statistics' attributes as
    ``__init__`` leaves them but for ``fields``. Enough for the worker's own methods that prepare a mini-batch."""
    from verl.workers.engine_workers import TrainingWorker

    worker = object.__new__(TrainingWorker)
    worker.engine = engine
    for name, value in (unasked() | fields).items():
        setattr(worker, name, value)
    return worker


def before_split(loss: str, engine: Any, data: Any, loss_function: Any, update: int) -> None:
    """Prepare ``data`` (this rank's mini-batch, no-padding) for ``loss`` as the tree's worker does, as its
    ``update``-th mini-batch (the worker's count, which Clip-Cov's draw reads); ``loss_function`` is the harness's
    ``partial(ppo_loss, config)``, whose config the worker is given. Nothing happens on a vanilla tree, or for a loss
    the worker leaves alone. Call it in the engine's train mode, as the worker does."""
    if loss not in WORKER_LOSSES or not has_mini_batch_hooks():  # other losses import no verl worker
        return
    from verl.utils import tensordict_utils as tu

    worker = worker_on(engine, **asked_for(loss_function.args[0]))
    tu.assign_non_tensor(data, global_steps=0, mini_batch_index=update)
    with engine.train_mode():
        worker._run_mini_batch_hooks(data)
