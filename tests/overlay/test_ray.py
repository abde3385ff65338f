"""A real local Ray run (``ray.init`` on this machine): the overlays are active in Ray workers with no call at all.

`ray_job.py` runs in the overlay venv (a warm parent's fork); its Ray actors, fresh processes of that venv that Ray
starts, build ``TrinityPolicyLoss`` and run a ``partial(value_loss, config=critic_cfg)`` pickled in the driver. With
the overlays on (the ``.pth`` start-up hook, the mechanism users get from installing this project), a worker that
inherits the driver's environment reports both overlays active and both losses invariant to the micro-batch count;
one started with ``PATCHSET_OVERLAYS=0`` in its runtime_env reports them off and shows the bug (the teeth), in the
same Ray run. With the switch off but the job's ``worker_process_setup_hook`` set to
``patchset_overlay.activate_all`` (docs/overlays.md's variant for workers in another environment) they are active
again.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import EVERY_PIECE, HERE


@pytest.fixture(scope="module")
def ray_runs(cases) -> dict[str, dict]:
    """Both Ray runs, at once (each spends seconds starting its cluster); the workers' observations by name."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(
            lambda how: cases.json(HERE / "ray_job.py", [how[1]], how[0], timeout=500),
            [("1", "environment"), ("0", "setup-hook")],
        )
    runs = {}
    for result in results:
        for name in result.keys() - {"driver_pid", "driver_python", "stderr"}:
            runs[name] = {**result[name], "driver_pid": result["driver_pid"], "driver_python": result["driver_python"]}
    return runs


@pytest.mark.parametrize(
    ("worker", "fixed"),
    [("inherited", True), ("switched-off", False), ("setup-hook", True)],
    ids=["overlays-on", "overlays-off", "off-but-worker-setup-hook"],
)
def test_ray_worker_gets_the_overlays_from_the_environment(ray_runs, worker, fixed):
    result = ray_runs[worker]

    assert result["pid"] != result["driver_pid"], "the losses must run in a Ray worker process"
    assert result["python"] == result["driver_python"]
    states = [piece["state"] for entry in result["status"] for piece in entry["pieces"]]
    if fixed:
        assert states == ["active"] * EVERY_PIECE, result["status"]
        assert result["critic"]["ratio"] == pytest.approx(1.0, rel=1e-5)
        assert result["actor"]["ratio"] == pytest.approx(1.0, rel=1e-5)
    else:
        assert not any(state == "active" for state in states), result["status"]
        assert result["critic"]["ratio"] == pytest.approx(4.0, rel=0.15)
        assert result["actor"]["ratio"] == pytest.approx(4.0, rel=0.15)
