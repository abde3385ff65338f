"""A real local Ray run: Ray actors build ``TrinityPolicyLoss`` and run a ``partial(value_loss, ...)`` pickled in
this driver, and each reports what the overlays say in its own process.

``ray_job.py environment``: nothing here activates an overlay. The workers are processes of the same environment,
so they get the overlays the way users get them, from ``patchset_overlay.pth`` at start-up: the ``inherited``
worker has this driver's environment; the ``switched-off`` one is started with ``PATCHSET_OVERLAYS=0`` in its
runtime_env (the teeth: the same observation shows the bug). ``ray_job.py setup-hook``, run with the switch off:
the job's ``worker_process_setup_hook`` activates the ``setup-hook`` worker instead (docs/overlays.md's variant
for clusters whose workers use another environment; Ray runs that hook for the job's runtime_env only). Prints one
JSON line: each worker's observations under its name.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


# per run: each worker's own runtime_env (None: the job's), keyed by what the test calls it
WORKERS = {
    "environment": {"inherited": None, "switched-off": {"env_vars": {"PATCHSET_OVERLAYS": "0"}}},
    "setup-hook": {"setup-hook": None},
}


def main(argv: list[str]) -> int:
    import ray
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss

    critic_cfg = CriticConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, loss_agg_mode="token-mean")
    critic_loss = functools.partial(value_loss, config=critic_cfg)  # as trinity.trainer.verl.trainer builds it

    (run,) = argv
    pythonpath = str(HERE)  # activation_cases, which puts engine_harness after the installed packages
    runtime_env: dict = {"env_vars": {"PYTHONPATH": pythonpath}}
    if run == "setup-hook":  # docs/overlays.md's variant for workers without the .pth: activate at worker start
        runtime_env["worker_process_setup_hook"] = "patchset_overlay.activate_all"
    variants = WORKERS[run]
    ray.init(num_cpus=len(variants), include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    try:

        @ray.remote(num_cpus=1)
        class LossWorker:
            def run(self, critic_loss) -> dict:
                from activation_cases import actor_observation, critic_observation

                from engine_harness.sim import use_cpu_unpadding
                from engine_harness.trinity_configs import algorithm_config, installed_actor_loss
                from patchset_overlay.status import collect

                use_cpu_unpadding()
                policy_loss = installed_actor_loss(algorithm_config("grpo", "token-mean"))  # built in the worker
                return {
                    "pid": os.getpid(),
                    "python": sys.executable,
                    "status": collect(),
                    "critic": critic_observation(critic_loss),
                    "actor": actor_observation(policy_loss),
                }

        def start(own: dict | None):  # type: ignore[no-untyped-def]
            if own is None:
                return LossWorker.remote()
            return LossWorker.options(runtime_env={"env_vars": {**own["env_vars"], "PYTHONPATH": pythonpath}}).remote()

        workers = {name: start(own) for name, own in variants.items()}
        runs = {name: worker.run.remote(critic_loss) for name, worker in workers.items()}
        result = {name: ray.get(run, timeout=400) for name, run in runs.items()}
    finally:
        ray.shutdown()
    result["driver_pid"] = os.getpid()
    result["driver_python"] = sys.executable
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
