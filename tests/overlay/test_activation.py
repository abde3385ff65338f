"""Activation: explicit and idempotent, undoable, and independent of import order and of pickling.

In processes of the overlay venv (verl 0.8.0, trinity-rft 0.6.0 and this project pip-installed), measured through
verl's engine steps (gradient norm with 4 micro-batches relative to 1: the bug gives ~4, the fix 1):

- explicit: with automatic activation off, ``activate()`` fixes a ``partial(value_loss)`` and the name Trinity's
  trainer module imported with ``from ... import`` before it was called, and that module's ``VERLTrainer`` then
  keeps DPO pairs together (``force_group_size`` 2); a second call returns False and changes nothing;
  ``deactivate()`` restores upstream's behaviour exactly (and the field goes away); activating again works;
- automatic: a process of the venv (its start-up as any process has it) reports both overlays active with no call;
- pickles: ``partial(value_loss, config=critic_cfg)``, a ``CriticConfig`` and a ``TrinityPolicyLoss`` pickled in one
  process behave as the overlays in the *unpickling* process say: fixed where they are on, upstream's where off; the
  ``TrinityPolicyLoss`` also keeps the switch it was built with (trainer.fix_actor_microbatch_loss_scale, off where
  it was built without the overlays: the process that builds Trinity's config needs them, as every process of the
  venv has them).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EVERY_PIECE, HERE

SCRIPT = HERE / "activation_cases.py"


def _fixed(observation: dict) -> bool:
    return observation["ratio"] == pytest.approx(1.0, rel=1e-5)


def _bug(observation: dict) -> bool:
    return observation["ratio"] == pytest.approx(4.0, rel=0.15)


def test_explicit_activation_is_idempotent_undoable_and_order_independent(cases):
    seen = cases.json(SCRIPT, ["explicit"], "0")

    assert _bug(seen["before"]) and seen["before"]["vf_loss_aggregation"] == "None"
    assert seen["activate"] == [True, True] and seen["activate again"] == [False, False]
    assert _fixed(seen["partial made before"]) and _fixed(seen["name imported before"]) and _fixed(seen["actor"])
    assert seen["partial made before"]["vf_loss_aggregation"] == "AggregationType.SUM"
    assert seen["loss_scale_factor"] == 3
    assert seen["deactivate"] == [True, True] and seen["deactivate again"] == [False, False]
    assert seen["after deactivate"] == seen["before"], "deactivate must restore upstream's behaviour exactly"
    assert _bug(seen["actor after deactivate"]) and seen["field after deactivate"] is False
    assert seen["dpo group size"] == 2 and seen["dpo group size after deactivate"] is None
    assert seen["reactivate"] == [True, True] and seen["after reactivate"] == seen["partial made before"]


@pytest.mark.parametrize("switch", ["1", "0"])
def test_status_of_a_plain_process(cases, switch):
    completed = cases.run(["-m", "patchset_overlay", "status", "--json"], switch)
    assert completed["returncode"] == 0, completed["stderr"][-4000:]
    report = json.loads(completed["stdout"])
    states = [piece["state"] for entry in report for piece in entry["pieces"]]
    assert [entry["overlay"] for entry in report] == ["verl_overlay", "trinity_overlay"]
    if switch == "1":
        assert states == ["active"] * EVERY_PIECE, report
        assert all(entry["how"] == "automatic (patchset_overlay.pth)" for entry in report)
    else:
        assert not any(state == "active" for state in states), report
        assert all(entry["how"] == "switched off by PATCHSET_OVERLAYS=0" for entry in report)
        # off as on: only this release's pieces (one written for another has none of its patches), by patch number
        listed = [piece for entry in report for piece in entry["pieces"] if "Hydra search path" not in piece["piece"]]
        numbered = [piece["patches"] and all(name[:4].isdigit() for name in piece["patches"]) for piece in listed]
        assert all(numbered), report


def test_a_switch_value_not_understood_is_said_once_and_leaves_the_overlays_on(cases):
    """A typo (``flase``) must not pass silently either way: one line at start-up, the default (on) kept."""
    # a bare start-up (no upstream imported: 0.2 CPU-s, not a fresh `status` importing torch, 8)
    completed = cases.run(["-c", "from patchset_overlay import startup; print(startup.outcome)"], "flase", fresh=True)
    assert completed["returncode"] == 0, completed["stderr"][-4000:]
    assert completed["stdout"].strip() == "automatic (patchset_overlay.pth)"
    said = [line for line in completed["stderr"].splitlines() if "PATCHSET_OVERLAYS=flase" in line]
    assert said == [
        "warning: patchset_overlay: PATCHSET_OVERLAYS=flase is not understood (off: 0, off, false, no; on: 1, on, "
        "true, yes); the overlays stay on"
    ], completed["stderr"][-4000:]


def test_status_without_verl_says_verl_is_not_installed(cases, tmp_path):
    """Trinity alone (verl hidden as if never installed): verl's pieces are off because verl is missing, not "off:
    automatic" under an overlay said to be on."""
    script = tmp_path / "status_without_verl.py"
    lines = ["import sys", "sys.modules['verl'] = None", "from patchset_overlay.__main__ import main"]
    script.write_text("\n".join([*lines, "main(['status', '--json'])", ""]))
    completed = cases.run([str(script)], "1")
    assert completed["returncode"] == 0, completed["stderr"][-4000:]
    verl = json.loads(completed["stdout"])[0]
    assert verl["overlay"] == "verl_overlay" and verl["problem"] == "verl is not installed", verl
    assert {(piece["state"], piece["reason"]) for piece in verl["pieces"]} == {
        ("off (refused)", "verl_overlay: verl is not installed")
    }, verl["pieces"]


@pytest.fixture(scope="module")
def pickles(tmp_path_factory, cases) -> dict[str, tuple[Path, dict]]:
    """The objects pickled once by a process with the overlays on and once by one with them off: (file, report)."""
    made = {}
    for dumper in ("1", "0"):
        pickled = tmp_path_factory.mktemp(f"dumped-by-overlays-{dumper}") / "objects.pkl"
        made[dumper] = pickled, cases.json(SCRIPT, ["dump", str(pickled)], dumper)
    return made


@pytest.mark.parametrize(("dumper", "loader"), [("1", "1"), ("0", "1"), ("1", "0")], ids=lambda s: f"overlays={s}")
def test_pickled_objects_take_the_behaviour_of_the_unpickling_process(pickles, cases, dumper, loader):
    pickled, dumped = pickles[dumper]
    loaded = cases.json(SCRIPT, ["load", str(pickled)], loader)

    check = _fixed if loader == "1" else _bug
    # the actor loss carries trainer.fix_actor_microbatch_loss_scale as state, set where it was built: one built
    # without the overlays (the switch at upstream's default, off) keeps upstream's weighting wherever it is loaded
    actor_check = _fixed if loader == dumper == "1" else _bug
    assert check(loaded["critic"]) and actor_check(loaded["actor"]), loaded
    assert loaded["partial config is the config class"] == "CriticConfig"
    if dumped["with_scale"]:
        assert loaded["config loss_scale_factor"] == 5
    elif loader == "1":
        assert loaded["config loss_scale_factor"] is None  # the field's default, as the patched class has it
