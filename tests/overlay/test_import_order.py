"""Each target is fixed the moment its own module has been imported, whatever else is imported, in any order.

Every case is a process of the overlay venv (verl 0.8.0, trinity-rft 0.6.0 and this project pip-installed, the
overlays switched on by the ``.pth`` file as users get them) that imports upstream's modules itself: a fork of a
warm parent that has torch and the other third-party modules imported, and for each shape one fresh process too
(``fresh``), started as users start one:

- the import-order matrix: a process that imports one target module and nothing else finds that module's targets
  (and those of every module it pulled in) running the overlay's code, and ``status`` reports every piece active;
  so does a process that imports all target modules in reverse order. The teeth: the same probes with
  ``PATCHSET_OVERLAYS=0`` find upstream's code;
- verl 0.9.1's own CPU test of the critic fix (fetched from the pinned, sha256-checked 0.9.1 sdist, never
  committed), which imports ``compute_value_loss`` alone, passes against verl 0.8.0 with the overlay and fails
  without it;
- composing verl's Hydra config first thing in a process and building the critic dataclass from it
  (``omega_conf_to_dataclass(cfg.critic)``) works for the FSDP and the Megatron critic, the field set.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import HERE, Cases

from patchset_overlay import overlays, watched_modules

SCRIPT = HERE / "import_order_cases.py"
TARGET_MODULES = watched_modules()  # each overlay's WATCHED: pinned below to be its pieces' target modules
UPSTREAM_TEST = "tests/trainer/ppo/test_value_loss_normalization_on_cpu.py"  # in the verl 0.9.1 sdist


# one fresh process per shape: a module imported alone (the one verl 0.9.1's own test imports; with the overlays off
# too, its teeth), Hydra composed first
FRESH_MODULE = "verl.trainer.ppo.core_algos"
FRESH_COMPOSE = ("1", "ppo_trainer")


def _probe(cases: Cases, switch: str, modules: tuple[str, ...], fresh: bool = False) -> dict:
    return cases.json(SCRIPT, ["probe", *modules], switch, fresh=fresh)


@pytest.fixture(scope="module")
def fresh_probes(cases: Cases) -> dict[str, dict]:
    """``FRESH_MODULE`` imported alone in a fresh process, the overlays on ("1") and off ("0"): the module-alone shape
    as users start it, its teeth, and what a fresh process has imported before its case runs."""
    return {switch: _probe(cases, switch, (FRESH_MODULE,), fresh=True) for switch in ("1", "0")}


def test_a_warm_parents_fork_starts_with_what_a_fresh_process_has_of_upstream_and_the_overlays(cases, fresh_probes):
    """The forks imported torch and the rest early, and nothing of upstream's, the overlays', Hydra's or OmegaConf's
    beyond what the start-up of a fresh process imports (the ``.pth`` file's finder): the shapes stay the users'."""
    for switch, fresh in fresh_probes.items():
        forked = _probe(cases, switch, (FRESH_MODULE,))["at start"]
        assert forked["owned"] == fresh["at start"]["owned"], (switch, forked["owned"], fresh["at start"]["owned"])
        assert forked["torch"] and not fresh["at start"]["torch"]


def test_overlay_watches_exactly_the_target_modules():
    """Each registered overlay package's ``WATCHED`` (what the start-up finder watches) is its pieces' modules."""
    import importlib

    assert set(TARGET_MODULES) == {module for overlay in overlays() for module in overlay.modules}
    for overlay in overlays():
        assert set(importlib.import_module(overlay.name).WATCHED) == set(overlay.modules), overlay.name


@pytest.mark.parametrize(
    ("module", "fresh"),
    [(module, False) for module in TARGET_MODULES] + [(FRESH_MODULE, True)],
    ids=[*TARGET_MODULES, f"{FRESH_MODULE}-fresh-process"],
)
def test_a_module_imported_alone_is_fixed_at_once(cases, module, fresh, request):
    seen = request.getfixturevalue("fresh_probes")["1"] if fresh else _probe(cases, "1", (module,))
    own = [label for label in seen["targets"] if label.rsplit(".", 1)[0] == module]
    if not own and module in {label.rsplit(".", 1)[0] for label in seen["elsewhere"]}:
        pytest.skip(f"{module}: only another release's series changes it (import_order_cases.PROBES)")
    assert own, f"no target of {module} was probed: {seen}"
    assert all(seen["targets"].values()), f"importing {module} alone left targets on upstream's code: {seen}"
    code_pieces = {name: state for name, state in seen["pieces"].items() if not name.startswith("critic.yaml")}
    assert set(code_pieces.values()) == {"active"}, seen


def test_modules_imported_in_reverse_order_are_all_fixed(cases):
    seen = _probe(cases, "1", tuple(reversed(TARGET_MODULES)))
    probed = {label.rsplit(".", 1)[0] for label in [*seen["targets"], *seen["elsewhere"]]}  # one target or more
    assert probed == set(TARGET_MODULES) and all(seen["targets"].values()), seen


@pytest.mark.parametrize("module", [TARGET_MODULES[0], TARGET_MODULES[-1]])  # a verl module, a Trinity one
def test_probe_can_fail_overlays_off_leave_upstream_code(cases, module, request):
    fresh = module == FRESH_MODULE  # the teeth of the fresh module-alone case
    seen = request.getfixturevalue("fresh_probes")["0"] if fresh else _probe(cases, "0", (module,))
    assert seen["targets"] and not any(seen["targets"].values()), seen


@pytest.fixture(scope="module")
def upstream_critic_test(tmp_path_factory) -> Path:
    """verl 0.9.1's own test of the critic fix, copied out of the pinned 0.9.1 release the test command fetched."""
    tree = os.environ.get("PATCHSET_FIXED_VERL_TREE")
    if not tree:
        pytest.skip("PATCHSET_FIXED_VERL_TREE is not set (scripts/test.sh fetches verl 0.9.1 and sets it)")
    folder = tmp_path_factory.mktemp("verl-0.9.1-test")
    return Path(shutil.copy(Path(tree) / UPSTREAM_TEST, folder))


@pytest.mark.parametrize(("switch", "passes"), [("1", True), ("0", False)], ids=["overlays-on", "overlays-off"])
def test_verl_091_own_critic_test_against_verl_080(cases, upstream_critic_test, switch, passes):
    argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider", upstream_critic_test.name]
    completed = cases.run(argv, switch, cwd=upstream_critic_test.parent)
    summary = completed["stdout"].strip().splitlines()[-1]
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (passed|failed)", summary)}
    if passes:
        assert completed["returncode"] == 0 and counts.get("passed", 0) >= 20, completed["stdout"][-3000:]
    else:  # the teeth: upstream's test does catch verl 0.8.0's bug
        assert completed["returncode"] != 0 and counts.get("failed", 0) >= 20, completed["stdout"][-3000:]


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A Hugging Face config of a tiny Qwen2 (the critic model config reads it; no weights, no download), written
    here: the transformers of the overlay venv is this one (its dependencies are the test venv's)."""
    from transformers import Qwen2Config

    folder = tmp_path_factory.mktemp("tiny-qwen2")
    config = Qwen2Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        architectures=["Qwen2ForCausalLM"],
    )
    config.save_pretrained(folder)
    return folder


CRITIC_CLASSES = (("ppo_trainer", "FSDPCriticConfig"), ("ppo_megatron_trainer", "McoreCriticConfig"))
COMPOSE_CASES = [
    (switch, config_name, critic_class, fresh)
    for switch in ("1", "0")
    for config_name, critic_class in CRITIC_CLASSES
    for fresh in (False, True)
    if not fresh or (switch, config_name) == FRESH_COMPOSE
]


@pytest.mark.parametrize(
    ("switch", "config_name", "critic_class", "fresh"),
    COMPOSE_CASES,
    ids=[f"overlays-{'on' if c[0] == '1' else 'off'}-{c[1]}{'-fresh-process' if c[3] else ''}" for c in COMPOSE_CASES],
)
def test_compose_first_then_build_the_critic_config(cases, tiny_model_dir, config_name, critic_class, switch, fresh):
    seen = cases.json(SCRIPT, ["compose", config_name, str(tiny_model_dir)], switch, fresh=fresh)
    assert seen["class"] == critic_class
    # on: the YAML and the dataclass both have the field; off: neither (never one without the other)
    assert seen["composed"] is seen["field"] is (switch == "1"), seen
