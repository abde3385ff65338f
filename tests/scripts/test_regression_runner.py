"""The regression runner hands the child pytest the trees under test first on sys.path, and says what to expect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchset.testcommand.testsuite import _ratio_table
from patchset.testenv.regression import regression_env


def test_trees_come_first_on_pythonpath_in_verl_then_trinity_order(tmp_path: Path):
    trees = {"trinity": tmp_path / "trinity", "verl": tmp_path / "verl"}

    env = regression_env(trees, "fixed", baseline_dir=None)

    assert env["PYTHONPATH"].split(":") == [str(trees["verl"].resolve()), str(trees["trinity"].resolve())]
    assert env["PATCHSET_VERL_TREE"] == str(trees["verl"].resolve())
    assert env["PATCHSET_TRINITY_TREE"] == str(trees["trinity"].resolve())
    assert env["PATCHSET_EXPECT"] == "fixed"
    assert "PATCHSET_BASELINE_DIR" not in env


def test_a_tree_not_given_is_not_inherited_from_the_callers_environment(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATCHSET_TRINITY_TREE", "/somewhere/else")

    env = regression_env({"verl": tmp_path}, "bug", baseline_dir=tmp_path / "results")

    assert "PATCHSET_TRINITY_TREE" not in env
    assert env["PATCHSET_BASELINE_DIR"] == str((tmp_path / "results").resolve())


def test_unknown_expectation_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match="expect"):
        regression_env({"verl": tmp_path}, "maybe", baseline_dir=None)


def test_ratio_table_puts_vanilla_next_to_patched(tmp_path: Path):
    rows = {"bug": 2.01, "fixed": 1.0}
    for expect, ratio in rows.items():
        line = json.dumps({"component": "critic", "case": "token-mean fixed-size-K2", "ratio": ratio})
        (tmp_path / f"ratios-{expect}.jsonl").write_text(line + "\n")

    table = _ratio_table(tmp_path).splitlines()

    assert table[1].split() == ["critic", "token-mean", "fixed-size-K2", "2.010", "1.000000"]


def test_ratio_table_reports_relative_errors_apart_from_the_ratios(tmp_path: Path):
    """A relative error of 0 is exact, not a ratio 1 away from 1."""
    rows = {"bug": [("K2", 2.0, 0.5), ("K4", 4.0, 0.75)], "fixed": [("K2", 1.0, 0.0), ("K4", 1.0, 1e-7)]}
    for expect, cases in rows.items():
        lines = []
        for case, ratio, error in cases:
            lines.append(json.dumps({"component": "distill", "case": case, "ratio": ratio}))
            lines.append(json.dumps({"component": "distill", "case": case, "relative_error": error}))
        (tmp_path / f"ratios-{expect}.jsonl").write_text("\n".join(lines) + "\n")

    table = _ratio_table(tmp_path).splitlines()

    assert [line.split()[:2] for line in table[1:3]] == [["distill", "K2"], ["distill", "K4"]]
    assert table[3].endswith("micro-batch's: vanilla 7.5e-01 (2 cases), patched 1.0e-07 (2 cases))")
    assert len(table) == 4


def test_verl_given_only_as_trinitys_dependency_is_marked_so(tmp_path: Path):
    trees = {"trinity": tmp_path / "trinity", "verl": tmp_path / "verl"}

    assert regression_env(trees, "fixed", None, dependencies=("verl",))["PATCHSET_VERL_ROLE"] == "dependency"
    assert "PATCHSET_VERL_ROLE" not in regression_env(trees, "fixed", None)


def test_apply_hands_its_pins_cache_and_quiet_console_to_the_verl_fetches_of_the_regression_run(
    world, monkeypatch, capsys
):
    """``apply --patches-dir P --cache C -q TRINITY``: the verl trees fetched for Trinity (the default one it imports,
    and each companion) come from P's pins and into C, and say nothing (-q), not from this repository's pins and
    $PATCHSET_CACHE."""
    from patchset.cli import main
    from patchset.testenv import regression

    toml = world.patches / "upstreams.toml"
    companion = '[[upstream]]\nkey = "verl"\nname = "verl"\nversion = "0.7.9"\nsdist_sha256 = "{}"\n'.format("0" * 64)
    companion += 'repository = "https://example.invalid/repo"\ntag = "v0.7.9"\nseries = "verl"\n'
    toml.write_text(toml.read_text() + "\n" + companion + 'default = false\ncompanion_for = "trinity"\n')
    monkeypatch.setenv("PATCHSET_CACHE", str(world.cache.parent / "not-this-cache"))
    fetched: list[tuple[str, Path, bool]] = []

    def ensure_upstream(pin, cache, console):
        fetched.append((pin.label, cache.root, console.quiet))
        return cache.root / "upstreams" / pin.dirname

    monkeypatch.setattr(regression, "ensure_upstream", ensure_upstream)
    monkeypatch.setattr(regression, "ensure_venv", lambda: Path("python"))
    runs: list[dict[str, Path]] = []
    monkeypatch.setattr(regression, "_run_suite", lambda python, trees, *rest: runs.append(dict(trees)) or 0)

    assert main(world.args("-q", str(world.trinity))) == 0

    cache = world.cache.resolve()
    assert fetched == [("verl 0.8.0", cache, True), ("verl 0.7.9", cache, True)]
    assert [run["verl"] for run in runs] == [cache / "upstreams" / "verl-0.8.0", cache / "upstreams" / "verl-0.7.9"]
    assert "Trinity's loss imports verl" not in capsys.readouterr().out
