"""A real local Ray run: a Ray actor builds ``TrinityPolicyLoss`` and runs a ``partial(value_loss, ...)`` pickled
in this driver, and reports what the overlays say in its own process.

Nothing here activates an overlay: the workers are processes of the same environment, so they get the overlays
the way users get them, from ``patchset_overlay.pth`` at start-up (or not, under ``PATCHSET_OVERLAYS=0``, which the
workers inherit from this driver). With the argument ``setup-hook`` the workers are activated instead by Ray's
``worker_process_setup_hook`` (docs/overlays.md's variant for clusters whose workers use another environment).
Prints one JSON line.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REGRESSION_DIR = HERE.parent / "regression"
sys.path[:0] = [str(HERE), str(REGRESSION_DIR)]


def main(argv: list[str]) -> int:
    import ray
    from verl.workers.config import CriticConfig
    from verl.workers.utils.losses import value_loss

    critic_cfg = CriticConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, loss_agg_mode="token-mean")
    critic_loss = functools.partial(value_loss, config=critic_cfg)  # as trinity.trainer.verl.trainer builds it

    runtime_env: dict = {"env_vars": {"PYTHONPATH": os.pathsep.join([str(HERE), str(REGRESSION_DIR)])}}
    if argv == ["setup-hook"]:  # docs/overlays.md's variant for workers without the .pth: activate at worker start
        runtime_env["worker_process_setup_hook"] = "patchset_overlay.activate_all"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    try:

        @ray.remote(num_cpus=1)
        class LossWorker:
            def run(self, critic_loss) -> dict:
                from activation_cases import actor_observation, critic_observation
                from engine_sim import use_cpu_unpadding
                from trinity.trainer.verl.losses import TrinityPolicyLoss
                from trinity_configs import algorithm_config

                from patchset_overlay.status import collect

                use_cpu_unpadding()
                policy_loss = TrinityPolicyLoss(algorithm_config("grpo", "token-mean"))  # built in the worker
                return {
                    "pid": os.getpid(),
                    "python": sys.executable,
                    "status": collect(),
                    "critic": critic_observation(critic_loss),
                    "actor": actor_observation(policy_loss),
                }

        worker = LossWorker.remote()
        result = ray.get(worker.run.remote(critic_loss), timeout=400)
    finally:
        ray.shutdown()
    result["driver_pid"] = os.getpid()
    result["driver_python"] = sys.executable
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
