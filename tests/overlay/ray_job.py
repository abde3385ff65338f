"""A real local Ray run: Ray actors build ``TrinityPolicyLoss`` and run a ``partial(value_loss, ...)`` pickled in
this driver, and each reports what the overlays say in its own process. Prints one JSON line: each worker's
observations under its name.

Nothing here activates an overlay in the driver or in the ``inherited`` worker: the workers are processes of the
same environment, so they get the overlays the way users get them, from ``patchset_overlay.pth`` at start-up. The
``setup-hook`` worker is started with ``PATCHSET_OVERLAYS=0`` in its runtime_env, so its automatic activation stands
down, and the job's ``worker_process_setup_hook`` activates it instead (docs/guide.md's variant for clusters whose
workers use another environment). Ray runs that hook in every worker of the job, and only the job's runtime_env can
set it, so the job's hook is `activate_where_switched_off`: `patchset_overlay.activate_all`, called in the workers
it is meant for, which leaves the ``inherited`` worker to the ``.pth``. The ``setup-hook`` worker then undoes the
overlays and observes again (the teeth: the same observations show the bug in that worker).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SETUP_HOOK = "ray_job.activate_where_switched_off"
# each worker's own env_vars, keyed by what the test calls it
WORKERS = {"inherited": {}, "setup-hook": {"PATCHSET_OVERLAYS": "0"}}


def activate_where_switched_off() -> None:
    """The job's ``worker_process_setup_hook``: docs/guide.md's ``patchset_overlay.activate_all``, in a worker whose
    automatic activation is switched off."""
    from patchset_overlay import activate_all, startup

    if startup.switched_off():
        activate_all()


def _observe(critic_loss) -> dict:  # type: ignore[no-untyped-def]
    """The overlays' state in this process and both losses' gradient ratios, the actor loss built here."""
    from activation_cases import actor_observation, critic_observation
    from harness.trinity_configs import installed_actor_loss

    from engine_harness.trinity_configs import algorithm_config
    from patchset_overlay.status import collect

    policy_loss = installed_actor_loss(algorithm_config("grpo", "token-mean"))
    return {"status": collect(), "critic": critic_observation(critic_loss), "actor": actor_observation(policy_loss)}


def main() -> int:
    import ray
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss

    critic_cfg = CriticConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, loss_agg_mode="token-mean")
    critic_loss = functools.partial(value_loss, config=critic_cfg)  # as trinity.trainer.verl.trainer builds it

    pythonpath = str(HERE)  # activation_cases, which puts engine_harness and harness after the installed packages
    runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}, "worker_process_setup_hook": SETUP_HOOK}
    ray.init(num_cpus=len(WORKERS), include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    try:

        @ray.remote(num_cpus=1)
        class LossWorker:
            def run(self, critic_loss, undo: bool) -> dict:  # type: ignore[no-untyped-def]
                import activation_cases  # noqa: F401  (puts engine_harness and harness on the path)

                from engine_harness.sim import use_cpu_unpadding
                from patchset_overlay import startup

                use_cpu_unpadding()
                report = {"pid": os.getpid(), "python": sys.executable, "start-up": startup.outcome}
                report.update(_observe(critic_loss))
                if undo:
                    from verl.workers.utils import losses

                    from patchset_overlay.runtime import deactivate

                    for overlay in startup.overlays():
                        deactivate(overlay)
                    # value_loss looked up again, as unpickling it in this process now would
                    report["undone"] = _observe(functools.partial(losses.value_loss, **critic_loss.keywords))
                return report

        workers = {
            name: LossWorker.options(runtime_env={"env_vars": {**own, "PYTHONPATH": pythonpath}}).remote()
            for name, own in WORKERS.items()
        }
        runs = {name: worker.run.remote(critic_loss, name == "setup-hook") for name, worker in workers.items()}
        result = {name: ray.get(run, timeout=400) for name, run in runs.items()}
    finally:
        ray.shutdown()
    result["driver_pid"] = os.getpid()
    result["driver_python"] = sys.executable
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
