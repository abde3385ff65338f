"""A real local Ray run (``ray.init`` on this machine): the overlays are active in Ray workers with no call at all.

`ray_job.py` runs in the overlay venv (a warm parent's fork); its Ray actors, fresh processes of that venv that Ray
starts, build ``TrinityPolicyLoss`` and run a ``partial(value_loss, config=critic_cfg)`` pickled in the driver. With
the overlays on (the ``.pth`` start-up hook, the mechanism users get from installing this project), a worker that
inherits the driver's environment reports both overlays active, switched on by the ``.pth``, and both losses
invariant to the micro-batch count. One started with ``PATCHSET_OVERLAYS=0`` in its runtime_env is activated by the
job's ``worker_process_setup_hook`` instead (docs/guide.md's variant for workers in another environment); undoing
the overlays there shows the bug in the same observations (the teeth). One cluster serves both workers.
"""

from __future__ import annotations

import pytest
from conftest import EVERY_PIECE, HERE

AUTOMATIC = "automatic (patchset_overlay.pth)"


@pytest.fixture(scope="module")
def ray_run(cases) -> dict:
    return cases.json(HERE / "ray_job.py", [], "1", timeout=500)


def _assert_fixed(observed: dict, how: str) -> None:
    assert [entry["how"] for entry in observed["status"]] == [how] * len(observed["status"]), observed["status"]
    states = [piece["state"] for entry in observed["status"] for piece in entry["pieces"]]
    assert states == ["active"] * EVERY_PIECE, observed["status"]
    assert observed["critic"]["ratio"] == pytest.approx(1.0, rel=1e-5)
    assert observed["actor"]["ratio"] == pytest.approx(1.0, rel=1e-5)


@pytest.mark.parametrize(
    ("worker", "start_up", "how"),
    [("inherited", AUTOMATIC, AUTOMATIC), ("setup-hook", "switched off by PATCHSET_OVERLAYS=0", "explicit")],
    ids=["overlays-on", "off-but-worker-setup-hook"],
)
def test_ray_worker_gets_the_overlays_from_the_environment(ray_run, worker, start_up, how):
    result = ray_run[worker]

    assert result["pid"] != ray_run["driver_pid"], "the losses must run in a Ray worker process"
    assert result["python"] == ray_run["driver_python"]
    assert result["start-up"] == start_up
    _assert_fixed(result, how)


def test_ray_worker_shows_the_bug_once_the_overlays_are_undone(ray_run):
    undone = ray_run["setup-hook"]["undone"]

    assert not any(piece["state"] == "active" for entry in undone["status"] for piece in entry["pieces"])
    assert undone["critic"]["ratio"] == pytest.approx(4.0, rel=0.15)
    assert undone["actor"]["ratio"] == pytest.approx(4.0, rel=0.15)
