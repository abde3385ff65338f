"""Guards: an overlay never replaces code it does not recognise, and says so once, clearly.

Each case runs in its own process of the overlay venv, with the overlays switched on the way users get them (the
``.pth`` file): an installed upstream whose version file says another release, an upstream function or class that
differs from the one the overlay was written for, a critic YAML that differs, and upstreams that already have the
fix (by content: the patched checkouts; by version: the verl 0.9.1 release). Each must leave the upstream objects
untouched, raise the expected warning naming the package, version and object, and report the reason in ``python -m
patchset_overlay status``; the other overlay is not affected. The messages are written to
``$PATCHSET_OVERLAY_RESULTS/overlay-guards.txt``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import HERE, Cases

CRITIC_OBJECTS = ("compute_value_loss", "value_loss", "CriticConfig")
STATISTICS_OBJECTS = (  # verl 0004 and 0005
    "compute_policy_loss_kl_cov",
    "compute_policy_loss_clip_cov",
    "compute_policy_loss_bypass_mode",
    "compute_kl_cov_mask",
    "compute_rollout_correction_weights",
    "compute_rollout_is_batch_mean",
    "ppo_loss",
    "ActorConfig",
)
UPSTREAM_OBJECTS = {
    "verl": (*CRITIC_OBJECTS, "distillation_loss", "compute_policy_loss_geo_mean", *STATISTICS_OBJECTS),
    "trinity": (
        "TrinityPolicyLoss.__call__",
        "TrinityPolicyLoss.__init__",
        "PolicyLossFn",
        "DPOLossFn.__call__",
        "DPOAlgorithm.check_config",
        "VERLTrainer._update_actor",
        "TrainerConfigValidator.validators",
    ),
}
POLICY_LOSS = "policy-loss-normalization"
DPO_PAIRS = "dpo-pairs-and-steps"
SWITCH = "loss-scale-switch-default"


def _changed_copy(tmp_path: Path, site: Path, package: str, relative: str, old: str, new: str) -> Path:
    """A copy of the installed ``package`` with one line of ``relative`` changed: the upstream drifted."""
    root = tmp_path / "changed"
    shutil.copytree(site / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    target = root / package / relative
    text = target.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} not found once in {target}"
    target.write_text(text.replace(old, new), encoding="utf-8")
    return root


def _record(case: str, messages: list[str]) -> None:
    results = os.environ.get("PATCHSET_OVERLAY_RESULTS")
    if results:
        Path(results).mkdir(parents=True, exist_ok=True)
        with (Path(results) / "overlay-guards.txt").open("a", encoding="utf-8") as stream:
            for message in messages:
                stream.write(f"{case}: {message}\n")


def _pieces(result: dict, overlay: str) -> list[dict]:
    return next(entry for entry in result["status"] if entry["overlay"] == overlay)["pieces"]


def _guard(cases: Cases, case: str, off: str, pythonpath: list[Path] = ()) -> dict:
    """Run one guard case; Trinity is imported only where its overlay is the one under test."""
    upstreams = "verl,trinity" if off == "trinity" else "verl"
    return cases.json(HERE / "guard_cases.py", [case, upstreams], "1", pythonpath=pythonpath)


def _check(result: dict, case: str, off: str, state: str, expected: str, objects: tuple[str, ...] = ()) -> None:
    """Every piece of the ``off`` overlay (or, with ``objects``, the one that changes them) is in ``state`` with
    ``expected`` in its reason and its one warning; its objects are untouched; any other piece stays active."""
    _record(case, result["warnings"])
    warnings = [message for message in result["warnings"] if message.startswith(f"{off}_overlay: ")]
    assert [message for message in warnings if expected in message], f"no warning containing {expected!r}: {warnings}"
    for name in objects or UPSTREAM_OBJECTS[off]:
        assert result["untouched"][name], f"{name} was changed: {result['untouched']}"
    # every piece is judged, for all its targets, at the first import of the upstream: one warning per piece
    pieces = [
        piece for piece in _pieces(result, f"{off}_overlay") if not piece["piece"].endswith("(Hydra search path)")
    ]
    judged = [piece for piece in pieces if expected in piece["reason"]]
    assert judged and (objects or judged == pieces), pieces
    assert len(warnings) == len(judged), f"expected one {off}_overlay warning per piece, got {warnings}"
    assert all(piece["state"] == state for piece in judged), judged
    assert all(piece["state"] == "active" for piece in pieces if piece not in judged), pieces
    if off == "trinity":  # the verl overlay, on the same process, is not affected
        assert all(piece["state"] == "active" for piece in _pieces(result, "verl_overlay")), "the verl overlay"


@pytest.mark.parametrize(
    ("off", "relative", "old", "new", "expected"),
    [
        (
            "verl",
            "version/version",
            "0.8.0",
            "0.6.1",
            "verl 0.6.1 is not a supported version (supported: 0.7.1, 0.8.0, 0.9.1); ",
        ),
        ("trinity", "__init__.py", '__version__ = "0.6.0"', '__version__ = "0.5.9"', "trinity-rft 0.5.9 is not a "),
    ],
    ids=["verl-0.6.1", "trinity-0.5.9"],
)
def test_unsupported_version_leaves_upstream_untouched(
    tmp_path, cases, overlay_site, off, relative, old, new, expected
):
    """The version is read from the installed files (as the fingerprints are), so this case changes the file."""
    changed = _changed_copy(tmp_path, overlay_site, off, relative, old, new)
    result = _guard(cases, f"{off} version", off, [changed])
    _check(result, f"{off} {new}", off, "off (refused)", expected)


def test_changed_verl_file_leaves_every_piece_that_changes_it_out(tmp_path, cases, overlay_site):
    """A file is recognised whole, by its sha256 in the pinned sdist: one changed line of core_algos.py keeps out
    every piece whose patches change that file (the critic, geo_mean, the mini-batch statistics); the distillation
    piece, which does not, goes on."""
    changed = _changed_copy(
        tmp_path,
        overlay_site,
        "verl",
        "trainer/ppo/core_algos.py",
        "vf_loss = 0.5 * agg_loss(",
        "vf_loss = 0.50 * agg_loss(",
    )
    result = _guard(cases, "changed", "verl", [changed])
    expected = "verl/trainer/ppo/core_algos.py in verl 0.8.0 is not the file this overlay was made for"
    objects = (*CRITIC_OBJECTS, "compute_policy_loss_geo_mean", *STATISTICS_OBJECTS)
    _check(result, "changed verl core_algos.py", "verl", "off (refused)", expected, objects)


def _check_trinity_pieces(result: dict, case: str, expected: dict[str, tuple[str, str]], untouched: set[str]) -> None:
    """Each Trinity piece (by name) is in the state given, with that text in its reason and its warning."""
    _record(case, result["warnings"])
    pieces = {piece["piece"]: piece for piece in _pieces(result, "trinity_overlay")}
    for name, (state, text) in expected.items():
        assert pieces[name]["state"] == state and text in pieces[name]["reason"], pieces[name]
        if state != "active":
            assert [message for message in result["warnings"] if name in message and text in message], result
    assert len(result["warnings"]) == sum(state != "active" for state, _ in expected.values()), result["warnings"]
    assert {name for name in UPSTREAM_OBJECTS["trinity"] if result["untouched"][name]} == untouched, result


@pytest.mark.parametrize(
    ("relative", "old", "new", "pieces", "untouched"),
    [
        # TrinityPolicyLoss's file changed: the piece that changes it stays out; the DPO fix, which does not, goes on
        (
            "trainer/verl/losses.py",
            "return policy_loss, metrics",
            "return policy_loss * 1, metrics",
            {POLICY_LOSS: "refused", DPO_PAIRS: "active", SWITCH: "builds on it"},
            {"TrinityPolicyLoss.__call__", "TrinityPolicyLoss.__init__", "TrainerConfigValidator.validators"},
        ),
        # DPOLossFn's file changed: both pieces change it (its aggregation; its logits and pairs): both stay out whole
        (
            "algorithm/policy_loss_fn/dpo_loss.py",
            '"dpo_loss": loss.detach().item(),',
            '"dpo_loss": float(loss.detach()),',
            {POLICY_LOSS: "refused", DPO_PAIRS: "refused", SWITCH: "builds on 0007"},
            set(UPSTREAM_OBJECTS["trinity"]),
        ),
    ],
    ids=["TrinityPolicyLoss", "DPOLossFn"],
)
def test_changed_trinity_file_leaves_every_piece_that_changes_it_out(
    tmp_path, cases, overlay_site, relative, old, new, pieces, untouched
):
    changed = _changed_copy(tmp_path, overlay_site, "trinity", relative, old, new)
    result = _guard(cases, "changed", "trinity", [changed])
    states = {
        "refused": ("off (refused)", f"trinity/{relative} in trinity-rft 0.6.0 is not the file this overlay was"),
        "active": ("active", "fits trinity-rft 0.6.0"),
        # 0010's change of VERLTrainer.prepare is made on 0001's: it cannot be derived without it
        "builds on it": ("off (refused)", "(it may build on 0001"),
        # and its config.py hunk, the option's default, on 0007's field: the first hunk that fails names it
        "builds on 0007": ("off (refused)", "(it may build on 0007"),
    }
    name = Path(relative).name
    _check_trinity_pieces(
        result, f"changed {name}", {piece: states[state] for piece, state in pieces.items()}, untouched
    )


def test_changed_critic_yaml_keeps_the_critic_piece_out(tmp_path, cases, overlay_site):
    """The critic YAML is one of the critic patch's files: a changed one keeps the whole piece out, code and YAML."""
    changed = _changed_copy(
        tmp_path,
        overlay_site,
        "verl",
        "trainer/config/critic/critic.yaml",
        "cliprange_value: 0.5",
        "cliprange_value: 0.4",
    )
    result = _guard(cases, "changed", "verl", [changed])
    _record("changed critic.yaml", result["warnings"])
    assert not result["critic_yaml_composes_loss_scale_factor"]
    expected = "critic not applied: verl/trainer/config/critic/critic.yaml in verl 0.8.0 is not the file"
    assert [m for m in result["warnings"] if expected in m], result["warnings"]
    assert all(result["untouched"][name] for name in CRITIC_OBJECTS), result["untouched"]
    yaml_piece = next(p for p in _pieces(result, "verl_overlay") if p["piece"].startswith("critic.yaml"))
    assert yaml_piece["state"] == "off (refused)"


@pytest.mark.parametrize(
    ("case", "off", "expected"),
    [
        ("patched", "verl", "verl 0.8.0 already has the "),  # the critic fix, the distillation fix
        ("patched", "trinity", "trinity-rft 0.6.0 already "),
    ],
)
def test_upstream_with_the_fix_keeps_the_overlay_off(cases, patched_trees, case, off, expected):
    result = _guard(cases, case, off, [patched_trees[off]])
    _check(result, f"{case} {off}", off, "off (upstream has the fix)", expected)


def test_verl_091_release_keeps_the_fixed_pieces_off_and_puts_geo_mean_on(cases):
    """The real verl 0.9.1 release (upstream's critic and distillation fixes, its own critic.yaml with
    loss_scale_factor): those pieces replace nothing; the geo_mean piece, whose bug 0.9.1 still has, goes on."""
    tree = os.environ.get("PATCHSET_FIXED_VERL_TREE")
    if not tree:
        pytest.skip("PATCHSET_FIXED_VERL_TREE is not set (scripts/test.sh sets it once verl 0.9.1 is fetched)")
    result = _guard(cases, "release", "verl", [Path(tree)])
    _check(
        result,
        "verl 0.9.1 release",
        "verl",
        "off (upstream has the fix)",
        "verl 0.9.1 has the fix (upstream since 0.9.0)",
        objects=(*CRITIC_OBJECTS, "distillation_loss"),
    )
    assert not result["untouched"]["compute_policy_loss_geo_mean"], "the geo_mean piece did not go onto verl 0.9.1"
    changed = [name for name in STATISTICS_OBJECTS if not result["untouched"][name]]
    assert changed == list(STATISTICS_OBJECTS), "the mini-batch statistics did not go onto verl 0.9.1"
    yaml_piece = next(p for p in _pieces(result, "verl_overlay") if p["piece"].startswith("critic.yaml"))
    assert yaml_piece["state"] == "off (upstream has the fix)"
    assert result["critic_yaml_composes_loss_scale_factor"], "upstream's own critic.yaml has the field"
