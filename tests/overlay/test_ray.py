"""A real local Ray run (``ray.init`` on this machine): the overlays are active in Ray workers with no call at all.

`ray_job.py` runs in the overlay venv; its Ray actor, another process of that venv, builds ``TrinityPolicyLoss``
and runs a ``partial(value_loss, config=critic_cfg)`` pickled in the driver. With the overlays on (the
``.pth`` start-up hook, the mechanism users get from installing this project), the worker reports both overlays
active and both losses are invariant to the micro-batch count; with ``PATCHSET_OVERLAYS=0`` the worker reports
them off and shows the bug (the teeth); with the switch off but Ray's ``worker_process_setup_hook`` set to
``patchset_overlay.activate_all`` (docs/overlays.md's variant for workers in another environment) they are active again.
"""

from __future__ import annotations

import pytest
from conftest import EVERY_PIECE, HERE, overlay_env, run_json


@pytest.mark.parametrize(
    ("switch", "args"),
    [("1", []), ("0", []), ("0", ["setup-hook"])],
    ids=["overlays-on", "overlays-off", "off-but-worker-setup-hook"],
)
def test_ray_worker_gets_the_overlays_from_the_environment(overlay_python, switch, args):
    result = run_json(overlay_python, HERE / "ray_job.py", args, overlay_env(switch), timeout=500)
    fixed = switch == "1" or args == ["setup-hook"]

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
