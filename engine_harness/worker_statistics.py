"""What the tree's ``TrainingWorker.train_batch`` does to a mini-batch before the engine splits it, for the harness's
runs of verl's real engine: a patched tree chooses KL-Cov's and Clip-Cov's tokens, or takes bypass mode's IS mean,
over the whole mini-batch, on a ``TrainingWorker`` that holds the engine (the forward the statistic needs,
``engine.infer_batch``, runs on it in train mode), with the loss's mini-batch hook and the worker's own hook runner
(verl 0004 to 0007, verl-0.7 0003 to 0006); a vanilla tree has none, and its loss chooses within each micro-batch.
The step's time includes the forward.

The harness calls the engine's ``train_batch`` itself (`engine_harness.engine.train_step`), so this stands where the
worker's own ``train_batch`` calls them; that the worker does call them, and ``init_model`` asks for them, the
regression tests check on the real classes (``test_verl_cov_selection.py``, ``test_verl_is_batch_norm.py``).
"""

from __future__ import annotations

from typing import Any

from engine_harness.training_worker import asked_for, has_mini_batch_hooks, worker_on

# the harness losses whose mini-batch the worker prepares before the split
WORKER_LOSSES = frozenset({"kl_cov", "is_norm"})


def before_split(loss: str, engine: Any, data: Any, loss_function: Any, update: int) -> None:
    """Prepare ``data`` (this rank's mini-batch, no-padding) for ``loss`` as the tree's worker does, as its
    ``update``-th mini-batch (the worker's count, which Clip-Cov's draw reads); ``loss_function`` is the harness's
    ``partial(ppo_loss, config)``, whose config the worker is given. Nothing happens on a vanilla tree, or for a loss
    the worker leaves alone. Call it in the engine's train mode, as the worker does (`engine_harness.engine.train_step`
    runs it there, as its ``before``, and times it with the step)."""
    if loss not in WORKER_LOSSES or not has_mini_batch_hooks():  # other losses import no verl worker
        return
    from verl.utils import tensordict_utils as tu

    worker = worker_on(engine, **asked_for(loss_function.args[0]))
    tu.assign_non_tensor(data, global_steps=0, mini_batch_index=update)
    with engine.train_mode():
        worker._run_mini_batch_hooks(data)
