"""A patch is retired by behaviour: upstream fixed its bug its own way, and the patch's own tests show it.

Invariants. When a patch neither applies nor is in upstream by content, its teeth (``teeth`` in
``patches/<series>/parts.toml``) run on the tree as shipped, expecting the fix:

- they pass: the patch is skipped as ``fixed upstream (its tests pass on <release> as shipped: ...)``, by apply and
  by ``--check``, exit 0, and the tree is left exactly as it was (upstream's code is not ours to change);
- they fail: the conflict stands, exit 3, and the message says the bug is still there; a later patch that does not
  apply either, after one retired so, is named as probably building on it;
- they cannot run (``--no-test``, no test environment): exit 3, and the message gives the command that decides it;
- nothing runs when every patch applies;
- only tests that ran and passed retire a patch: one that errors, or a selection whose tests all skip, decides
  nothing.

The fake series proves the logic with a stand-in for the teeth run; one test proves it end to end on two simulated
releases: verl 0.9.1 whose ``compute_policy_loss_geo_mean`` ends as upstream PR #5614 (open) writes it (``agg_loss``
over a per-sequence loss with ``response_mask.sum(-1) > 0`` as the sequence mask, ``seq-mean-token-sum``,
``**config.global_batch_info``), or as PR #7916 (open) does (the same, and a ValueError without the engine's global
batch info), bumped to 0.9.2: the real teeth of 0003 run on it (a process importing torch and verl) and pass, and
the regression run that follows leaves out 0003's choice tests (``choices`` in parts.toml: the mean over every row
outside the engine, where both PRs mask rows without a response), saying so. That the same teeth fail on real code
that keeps the bug is the verl 0.9.1 step's (0003's teeth on the vanilla release) and the teeth step's to show, and
the exit 3 that follows is the fake series': not run a second time here.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
from patchset_fakes import TEST_GIT_ENV, UPSTREAM_SCALE, VERL_PATCH_1, VERL_PATCH_2, git, tree_state

from patchset.apply import behaviour, job
from patchset.apply.plan import Behaviour, Verdict
from patchset.apply.target import TreeToPatch
from patchset.cli import main
from patchset.plumbing.ui import Console
from patchset.series.model import load_series
from patchset.testenv import regression
from patchset.upstreams.fetch import resolve_cache
from patchset.upstreams.pins import load_pins

CORE = "verl/trainer/ppo/core_algos.py"
VERSION = "verl/version/version"
TEETH = {VERL_PATCH_1: "scale_added", VERL_PATCH_2: "scale_fixed"}
GEO_MEAN_PATCH = "0003-algo-normalize-geo-mean-policy-loss-global-mini.patch"
GEO_MEAN_END = "    pg_loss = torch.mean(pg_losses)\n"
# the end of compute_policy_loss_geo_mean as upstream PR #5614 (open) proposes it, in our words
PR_5614_END = (
    "    # one loss per sequence, aggregated over the global mini-batch as the other sequence-level losses do\n"
    "    seq_mask = (response_mask.sum(-1) > 0).float()\n"
    "    pg_loss = agg_loss(\n"
    "        loss_mat=pg_losses.unsqueeze(-1),\n"
    "        loss_mask=seq_mask.unsqueeze(-1),\n"
    '        loss_agg_mode="seq-mean-token-sum",\n'
    "        **config.global_batch_info,\n"
    "    )\n"
)


# ... as upstream PR #7916 (open) proposes it, in our words: the same aggregation, and no fallback without the engine's
# global batch info (a ValueError instead of a per-micro-batch mean)
PR_7916_END = (
    "    if not config.global_batch_info:\n"
    '        raise ValueError("geo_mean needs the global batch info the engine sets (global_batch_size, dp_size)")\n'
    + PR_5614_END.split("\n", 1)[1]
)
FORMS = {"verl#5614": PR_5614_END, "verl#7916": PR_7916_END}


@pytest.fixture
def teeth_runs(monkeypatch: pytest.MonkeyPatch, world) -> dict[str, str]:
    """The fake world's verl series with teeth, and a stand-in for the teeth run: {selection: verdict} to set, and
    ``calls`` the selections it was asked."""
    tables = "".join(f'[{name[5:-6]}]\nteeth = "{tests}"\n' for name, tests in TEETH.items())
    (world.patches / "verl" / "parts.toml").write_text(tables)
    verdicts: dict[str, str] = {"calls": ""}

    def run(self: behaviour.TeethRunner, target: TreeToPatch, selection: str) -> Behaviour:
        verdicts["calls"] += f"{selection};"
        fixed = verdicts[selection] == "fixed"
        return Behaviour(Verdict(verdicts[selection]), selection, passed=3, failed=0 if fixed else 2, why="counted")

    monkeypatch.setattr(behaviour.TeethRunner, "__call__", run)
    return verdicts


def _upstream_fixed_it_its_own_way(tree: Path) -> None:
    """Upstream's own form of the helper both patches change, in a release no pin names (0.8.5, applied to with
    --force-version): neither patch applies, and neither is recognised. (On a pinned release a file that differs from
    its sdist is a local change: the last test of the fake series.)"""
    core = tree / CORE
    core.write_text(core.read_text().replace("# line 10\n", "# line 10\n" + UPSTREAM_SCALE))
    (tree / VERSION).write_text("0.8.5\n")
    git(tree, "commit", "-qam", "upstream: scale, its own way")


def test_patches_whose_tests_pass_as_shipped_are_skipped_and_the_tree_kept(capsys, world, teeth_runs, regression_calls):
    _upstream_fixed_it_its_own_way(world.verl)
    teeth_runs.update(scale_added="fixed", scale_fixed="fixed")
    before = tree_state(world.verl)

    assert main(world.args("--check", str(world.verl))) == 0
    checked = capsys.readouterr().out
    code = main(world.args("--force-version", str(world.verl)))

    out = capsys.readouterr().out
    assert code == 0
    for name in TEETH:
        said = f"* {name} skipped: fixed upstream (its tests pass on verl 0.8.5 as shipped: counted"
        assert said in checked and said in out
    assert "0 would apply, 0 already applied, 2 fixed upstream (by their tests)" in checked
    assert "0 applied, 0 already applied, 2 fixed upstream (by their tests)" in out
    assert tree_state(world.verl) == before
    assert regression_calls == [({"verl": world.verl.resolve()}, "fixed")]  # and the suite runs on upstream's code


def test_a_later_patch_failing_after_a_retired_one_is_named_as_building_on_it(capsys, world, teeth_runs):
    _upstream_fixed_it_its_own_way(world.verl)
    teeth_runs.update(scale_added="fixed", scale_fixed="bug")
    before = tree_state(world.verl)

    code = main(world.args("--force-version", str(world.verl)))

    err = capsys.readouterr().err.split("\n", 1)[1]  # after the warning that 0.8.5 is not pinned
    assert code == 3
    assert err.startswith(f"error: {VERL_PATCH_2} does not apply to verl 0.8.5")
    assert "its tests fail on verl 0.8.5 as shipped (counted): the bug is still there" in err
    assert f"it changes files that {VERL_PATCH_1} changed, which upstream fixed its own way" in err
    assert tree_state(world.verl) == before


def test_without_tests_the_conflict_stands_and_says_what_decides_it(capsys, world, teeth_runs):
    _upstream_fixed_it_its_own_way(world.verl)

    code = main(world.args("--no-test", "--force-version", str(world.verl)))

    err = capsys.readouterr().err
    assert code == 3
    assert (
        f"its tests were not run (--no-test); 'scripts/apply.sh --check {world.verl}' decides it (it runs "
        f"tests/regression -k 'scale_added' on the tree as shipped, expecting the fix)"
    ) in err
    assert teeth_runs["calls"] == ""


def test_nothing_runs_when_every_patch_applies(capsys, world, teeth_runs):
    assert main(world.args("--check", str(world.verl))) == 0

    assert teeth_runs["calls"] == ""


def test_on_a_pinned_release_files_unlike_its_sdist_are_local_changes_never_fixed_upstream(
    capsys, world, teeth_runs, fake_pypi
):
    """A pinned release does not change: a tree that says verl 0.8.0 but whose patched file differs from the 0.8.0
    sdist has local changes (or an earlier series), so the teeth, which would pass here, are not even asked."""
    _upstream_fixed_it_its_own_way(world.verl)
    (world.verl / VERSION).write_text("0.8.0\n")
    git(world.verl, "commit", "-qam", "back to 0.8.0's version, the change kept")
    teeth_runs.update(scale_added="fixed", scale_fixed="fixed")
    before = tree_state(world.verl)

    code = main(world.args("--check", str(world.verl)))

    out = capsys.readouterr().out
    assert code == 3 and teeth_runs["calls"] == ""
    assert f"* {VERL_PATCH_1} does not apply: {CORE}, hunk " in out and "fixed upstream" not in out
    assert f"its files differ from verl 0.8.0's sdist ({CORE}): local changes, or an earlier series" in out
    assert fake_pypi == ["verl==0.8.0"]  # the sdist, fetched and checked by sha256 into the cache
    assert tree_state(world.verl) == before


@pytest.mark.parametrize(
    "counts, expected",
    [
        (behaviour.Counts(0, passed=3, skipped=1), "fixed"),
        (behaviour.Counts(1, passed=2, failed=1), "bug"),
        (behaviour.Counts(1, passed=2, errors=1), "untested"),  # an error says nothing about the bug
        (behaviour.Counts(0, skipped=4), "untested"),  # every test skipped: none ran
        (behaviour.Counts(5), "untested"),  # the selection collected nothing
    ],
)
def test_only_tests_that_ran_and_passed_retire_a_patch(counts, expected):
    target = SimpleNamespace(shown="~/src/verl")

    assert behaviour.verdict(target, "geo_mean", counts).verdict is Verdict(expected)  # type: ignore[arg-type]


def test_junit_reports_are_summed_and_one_cut_short_counts_nothing(tmp_path):
    suite = '<testsuites><testsuite tests="{}" failures="1" errors="0" skipped="2"></testsuite></testsuites>'
    (tmp_path / "run-0.xml").write_text(suite.format(5))
    (tmp_path / "run-1.xml").write_text(suite.format(4))

    assert behaviour.junit_counts(1, tmp_path) == behaviour.Counts(1, passed=3, failed=2, skipped=4)
    (tmp_path / "run-2.xml").write_text("<testsuites><testsuite")
    assert behaviour.junit_counts(1, tmp_path) == behaviour.Counts(1)


def test_without_a_test_environment_the_conflict_stands_and_says_why(monkeypatch, tmp_path):
    from patchset.testenv import regression
    from patchset.testenv.venv import VenvError

    def no_venv(*args: object, **kwargs: object) -> int:
        raise VenvError("pip install -r requirements/lock.txt failed (exit 1):\nno network")

    monkeypatch.setattr(regression, "run_regression_tests", no_venv)
    target = SimpleNamespace(label="verl 0.9.2", key="verl", root=tmp_path, shown="~/src/verl")
    runner = behaviour.TeethRunner(None, Console(quiet=True))  # type: ignore[arg-type]

    shown = runner(target, "geo_mean")  # type: ignore[arg-type]

    assert (shown.verdict, shown.command) == (Verdict.UNTESTED, "scripts/apply.sh --check ~/src/verl")
    assert (
        shown.why == "the test environment could not be built (pip install -r requirements/lock.txt failed (exit 1):)"
    )


def _release(tree: Path, end: str, version: str) -> None:
    """Rewrite the end of the tree's ``compute_policy_loss_geo_mean`` and its version, committed."""
    core = tree / "verl" / "trainer" / "ppo" / "core_algos.py"
    text = core.read_text(encoding="utf-8")
    assert text.count(GEO_MEAN_END) == 1, "the geo_mean end of verl 0.9.1 moved: update this fixture"
    core.write_text(text.replace(GEO_MEAN_END, end), encoding="utf-8")
    (tree / "verl" / "version" / "version").write_text(f"{version}\n", encoding="utf-8")
    git(tree, "commit", "-qam", f"release {version}")


@pytest.fixture
def verl_0_9_1(tmp_path: Path) -> Path:
    """A clone of the cached vanilla verl 0.9.1 checkout (``scripts/test.sh`` fetches it); skips without one."""
    pin = load_pins(Path(job.__file__).parents[2] / "patches" / "upstreams.toml").find("verl", "0.9.1")
    assert pin is not None
    vanilla = resolve_cache(None, os.environ, Path(job.__file__).parents[2]).upstreams / pin.dirname
    if not (vanilla / ".git").exists():
        pytest.skip(f"no cached checkout of {pin.label} at {vanilla} (scripts/test.sh fetches it)")
    clone = tmp_path / "verl-0.9.2"
    command = ["git", "clone", "-q", "--no-hardlinks", str(vanilla), str(clone)]
    subprocess.run(command, check=True, capture_output=True, env={**os.environ, **TEST_GIT_ENV})
    return clone


@pytest.mark.parametrize("form", FORMS)
def test_a_release_that_fixed_geo_mean_its_own_way_retires_0003_and_its_choice_tests(
    capsys, monkeypatch, verl_0_9_1, form
):
    series = load_series(Path(job.__file__).parents[2] / "patches", "verl")
    assert GEO_MEAN_PATCH in series.teeth and GEO_MEAN_PATCH in series.choices
    tree = verl_0_9_1
    # the release also has the series' later fixes (verl 0004), so that retiring 0003 is all apply has to do
    names = [patch.name for patch in series.patches]
    later = series.patches[names.index(GEO_MEAN_PATCH) + 1 :]
    for patch in later:
        git(tree, "apply", str(patch.path))
    _release(tree, FORMS[form], "0.9.2")
    before = tree_state(tree)
    fixed = f"* {GEO_MEAN_PATCH} skipped: fixed upstream (its tests pass on verl 0.9.2 as shipped: "
    choices = series.choices[GEO_MEAN_PATCH]
    left_out = f"* Leaving out {GEO_MEAN_PATCH}'s tests of this series' own choices (-k {choices!r})"

    # apply: exit 0, upstream's code untouched (--check says the same, by the same plan: the fake series shows it).
    # The regression run that ends apply is the whole suite less 0003's choice tests: recorded here, not run. Of the
    # fix's own tests (geo_mean) that leaves its teeth, which passed on this tree just before; the rest of the suite
    # is the fix step's and the verl 0.9.1 step's to run
    selections: list[Sequence[str]] = []

    def recorded(trees, run, workspace, console=None):
        if not run.parallel:  # 0003's teeth, on the tree as shipped (one process): run as apply runs them
            return real_run(trees, run, workspace, console)
        selections.append(run.pytest_args)
        return 0

    real_run = regression.run_regression_tests
    monkeypatch.setattr(regression, "run_regression_tests", recorded)
    assert main(["apply", "--force-version", str(tree)]) == 0
    out = capsys.readouterr().out
    summary = f"0 applied, {len(later)} already applied, 2 skipped, 1 fixed upstream (by their tests)"
    assert fixed in out and summary in out
    assert left_out in out
    assert selections == [["-k", f"not (({choices}))"]]
    assert tree_state(tree) == before
