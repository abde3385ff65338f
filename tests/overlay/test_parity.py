"""Overlay / patch parity: for the same inputs the overlays give exactly what the patched checkouts give.

Every loss case of `parity_cases.py` (the verl critic, its distillation loss and Trinity's policy loss, every
``loss_agg_mode``, PPO, GRPO and DPO, and every policy loss Trinity registers with the grouping its trainer asks for,
with and without entropy and KL, several splits and dp 2, inside and outside the engine): the micro-batch losses, the
gradient and the metrics are bit-for-bit equal, as are the start-up warnings and DPO's micro-batch rows, and so are
``CriticConfig``'s fields, repr and docstring and the Hydra-composed critic section. The comparison is against
whatever the patched checkouts do; every file the overlays derive is the patched checkout's, byte for byte, and no
upstream code is kept in the overlay packages. The same comparison against the overlays switched off must find
differences: it can fail.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import HERE, REPO_ROOT, Cases


def _cases(cases: Cases, out: Path, switch: str, pythonpath: list[Path] = ()) -> dict[str, Any]:
    """Every case computed by a process of the overlay venv (a warm parent's fork), written to ``out``."""
    completed = cases.run([str(HERE / "parity_cases.py"), str(out)], switch, pythonpath=pythonpath)
    assert completed["returncode"] == 0, (completed["stdout"] + completed["stderr"])[-4000:]
    return torch.load(out, weights_only=False)


def _equal(left: Any, right: Any) -> bool:
    if isinstance(left, torch.Tensor):
        return isinstance(right, torch.Tensor) and left.dtype == right.dtype and torch.equal(left, right)
    if isinstance(left, dict):
        return isinstance(right, dict) and left.keys() == right.keys() and all(_equal(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple):
        return type(left) is type(right) and len(left) == len(right) and all(map(_equal, left, right))
    return left == right


def _states(provenance: dict) -> dict[str, list[str]]:
    return {entry["overlay"]: [piece["state"] for piece in entry["pieces"]] for entry in provenance["overlays"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cases: Cases, overlay_site: Path, patched_trees: dict[str, Path]):
    tmp = tmp_path_factory.mktemp("parity")
    runs = {
        "patched": ("0", [patched_trees["verl"], patched_trees["trinity"]]),
        "vanilla": ("0", []),
        "overlay": ("1", []),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:  # two warm parents (overlays off, on): two runs at a time
        started = {kind: pool.submit(_cases, cases, tmp / f"{kind}.pt", *how) for kind, how in runs.items()}
        patched, vanilla, overlay = (started[kind].result() for kind in runs)
    assert Path(patched["provenance"]["verl"]).is_relative_to(patched_trees["verl"])
    assert Path(patched["provenance"]["trinity"]).is_relative_to(patched_trees["trinity"])
    for run in (overlay, vanilla):
        assert Path(run["provenance"]["verl"]).is_relative_to(overlay_site)
        assert Path(run["provenance"]["trinity"]).is_relative_to(overlay_site)
    assert all(state == "active" for states in _states(overlay["provenance"]).values() for state in states)
    assert not any(state == "active" for states in _states(vanilla["provenance"]).values() for state in states)
    return {"patched": patched, "overlay": overlay, "vanilla": vanilla}


def test_every_loss_case_is_bit_for_bit_equal_to_the_patched_checkout(runs):
    patched, overlay = runs["patched"]["cases"], runs["overlay"]["cases"]
    assert overlay.keys() == patched.keys()
    different = [name for name in patched if not _equal(overlay[name], patched[name])]
    assert not different, f"{len(different)} of {len(patched)} cases differ, e.g. {different[:5]}"


def test_config_is_equal_to_the_patched_checkout(runs):
    patched, overlay = runs["patched"]["config"], runs["overlay"]["config"]
    different = [name for name in patched if not _equal(overlay[name], patched[name])]
    assert not different, f"differs: {different}"
    assert overlay["composed critic"]["loss_scale_factor"] == 333


def test_comparison_can_fail_vanilla_differs_from_patched(runs):
    patched, vanilla = runs["patched"]["cases"], runs["vanilla"]["cases"]
    different = [name for name in patched if not _equal(vanilla.get(name), patched[name])]
    assert len(different) > len(patched) // 2, f"only {len(different)} of {len(patched)} vanilla cases differ"
    assert not _equal(runs["vanilla"]["config"], runs["patched"]["config"])


def test_distillation_cases_differ_on_vanilla_wherever_a_rank_has_more_than_one_micro_batch(runs):
    """verl 0002's cases have teeth of their own: vanilla 0.8.0 normalizes each rank's first micro-batch of a first
    call by its own counts, right only for one micro-batch on one rank."""
    patched, vanilla = runs["patched"]["cases"], runs["vanilla"]["cases"]
    names = [name for name in patched if name.startswith("distillation ")]
    differ = {name for name in names if not _equal(vanilla[name], patched[name])}
    assert names and differ == {name for name in names if not name.endswith(" dp1 fixed-size-K1")}


@pytest.mark.parametrize("series", ["verl", "verl-0.7", "trinity"])
def test_every_patch_of_the_series_goes_on_with_exactly_one_piece(series):
    """Each overlay's pieces name every patch of each series it derives, once (by slug: verl-0.7's 0002 is verl's
    0003, copied), and nothing else."""
    import importlib

    from patchset.series.model import load_series

    patches = load_series(REPO_ROOT / "patches", series).patches
    # a patch that changes only upstream's tests/ installs nothing: no piece (patchset_overlay.derive.overlay_spec)
    slugs = sorted(Path(p.name).stem[5:] for p in patches if not all(f.startswith("tests/") for f in p.files))
    overlay = importlib.import_module(f"{series.split('-')[0]}_overlay.pieces").OVERLAY
    named = [slug for piece in overlay.pieces for slug in piece.patches if slug in slugs]
    assert sorted(named) == slugs, f"patches/{series}/series lists {slugs}, but {overlay.name}'s pieces name {named}"


def test_every_derived_file_is_the_patched_checkouts_file(vanilla_trees, patched_trees):
    """What the overlays run is what ``scripts/apply.sh`` makes: each file derived from the series on the vanilla
    release is byte for byte the patched checkout's (the critic YAML among them)."""
    from patchset_overlay import overlays
    from patchset_overlay.derive import Plan
    from patchset_overlay.spec import UpstreamSource

    checked = []
    for overlay in overlays():
        plan = Plan.make(overlay, UpstreamSource(overlay.upstream, vanilla_trees[overlay.upstream] / overlay.upstream))
        assert plan.derive(list(overlay.pieces)) == {}
        for path, derived in plan.derived.items():
            assert derived.text == (patched_trees[overlay.upstream] / path).read_text(encoding="utf-8"), path
            checked.append(path)
    assert "verl/trainer/config/critic/critic.yaml" in checked and len(checked) >= 15, checked


def _definitions(path: Path) -> dict[str, str]:
    """{name: the AST dump of its body} of every function and class in a Python file, at any depth."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name: ast.dump(ast.Module(node.body, [])) for node in ast.walk(tree) if isinstance(node, kinds)}


def test_no_upstream_code_is_kept_in_the_overlay_packages(vanilla_trees, patched_trees):
    """The overlays derive what they run from the patches: no function or class of an upstream module they change,
    as released or as patched, is in ``verl_overlay/`` or ``trinity_overlay/``, under any name."""
    from patchset_overlay import overlays

    upstream = set()
    for overlay in overlays():
        for tree in (vanilla_trees[overlay.upstream], patched_trees[overlay.upstream]):
            for module in overlay.modules:
                path = tree / (module.replace(".", "/") + ".py")
                if path.is_file():
                    upstream.update(_definitions(path).values())
    assert len(upstream) > 200, "the upstream modules were not read"
    ours = {
        f"{path.relative_to(REPO_ROOT)}:{name}": body
        for package in ("verl_overlay", "trinity_overlay")
        for path in (REPO_ROOT / package).rglob("*.py")
        for name, body in _definitions(path).items()
    }
    assert not [where for where, body in ours.items() if body in upstream]
