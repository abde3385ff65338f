"""What the tree's ``TrainingWorker.train_batch`` does to a mini-batch before the engine splits it, for the harness's
runs of verl's real engine: a patched tree chooses KL-Cov's and Clip-Cov's tokens, or takes bypass mode's IS mean,
over the whole mini-batch, on a ``TrainingWorker`` that holds the engine (the forward the statistic needs,
``engine.infer_batch``, runs on it in train mode): with the loss's mini-batch hook and the worker's own hook runner
(verl 0004 to 0007), or on a tree of the verl-0.7 series with its ``_assign_cov_selection_mask`` /
``_assign_is_batch_mean``; a vanilla tree has neither, and its loss chooses within each micro-batch. The step's time
includes the forward.

The harness calls the engine's ``train_batch`` itself (`engine_harness.engine.train_step`), so this stands where the
worker's own ``train_batch`` calls them; that the worker does call them, and ``init_model`` asks for them, the
regression tests check on the real classes (``test_verl_cov_selection.py``, ``test_verl_is_batch_norm.py``).
"""

from __future__ import annotations

from typing import Any

from engine_harness.training_worker import asked_for, has_mini_batch_hooks, worker_on

# the harness loss, and the worker's method and attribute that prepare its mini-batch
WORKER_STEPS = {
    "kl_cov": ("_assign_cov_selection_mask", "cov_selection_config"),
    "is_norm": ("_assign_is_batch_mean", "is_batch_norm_config"),
}


def before_split(loss: str, engine: Any, data: Any, loss_function: Any, update: int) -> None:
    """Prepare ``data`` (this rank's mini-batch, no-padding) for ``loss`` as the tree's worker does, as its
    ``update``-th mini-batch (the worker's count, which Clip-Cov's draw reads); ``loss_function`` is the harness's
    ``partial(ppo_loss, config)``, whose config the worker is given. Nothing happens on a vanilla tree, or for a loss
    the worker leaves alone. Call it in the engine's train mode, as the worker does (`engine_harness.engine.train_step`
    runs it there, as its ``before``, and times it with the step)."""
    step = WORKER_STEPS.get(loss)
    if step is None:  # no import of verl's workers for the other losses
        return
    from verl.workers.engine_workers import TrainingWorker

    if has_mini_batch_hooks():
        from verl.utils import tensordict_utils as tu

        worker = worker_on(engine, **asked_for(loss_function.args[0]))
        tu.assign_non_tensor(data, global_steps=0, mini_batch_index=update)
        with engine.train_mode():
            worker._run_mini_batch_hooks(data)
        return
    if not hasattr(TrainingWorker, step[0]):
        return
    method, attribute = step
    worker = worker_on(engine, num_cov_selections=update, **{attribute: loss_function.args[0]})
    getattr(worker, method)(data)
