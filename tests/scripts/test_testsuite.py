"""The test command plans the steps its docstring names (all of them, or with --quick the environment, the pinned
trees and the regression suite only), each step runs its own body in a process of its own, and the exit code and
summary follow the steps' verdicts. The step bodies are replaced by recorders here (the real ones take minutes and are
what the test command itself runs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from patchset.cli import main
from patchset.plumbing.limits import scaled
from patchset.testcommand import testsuite
from patchset.testcommand.scheduler import Step
from patchset.testenv.regression import BASELINE_DONE_FILE, SUITE_LIMIT_S, WARM_SERVER_VARIABLE
from patchset.testenv.suite_forks import SOCKET_VARIABLE
from patchset.testenv.venv import REPO_ROOT
from patchset.upstreams.workspace import resolve_workspace

# the steps as the test command's docstring lists them ("- name: what it does", or "- name, what it is"), in the
# order they take a free job slot (see ``plan``): teeth and the tooling tests first, the overlays, fix, then the rest
DOCUMENTED = re.findall(r"^- ([a-z0-9. ]+?)[:,] ", testsuite.__doc__ or "", re.MULTILINE)
SLOT_ORDER = ["environment", "pinned trees", "lint", "teeth", "tooling", "overlays", "fix", "wheels"]
EVERY_STEP = sorted(DOCUMENTED, key=lambda name: SLOT_ORDER.index(name) if name in SLOT_ORDER else len(SLOT_ORDER))
QUICK_STEPS = ["environment", "pinned trees", "teeth", "fix"]


def _workspace(tmp_path: Path):  # type: ignore[no-untyped-def]
    return resolve_workspace(None, str(tmp_path / "cache"), {})


@pytest.fixture(autouse=True)
def _no_scratch_on_ram(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The runs of the test command here write into the test's own folder, not a scratch folder on /dev/shm
    (test_scratch.py tests that), which one whose step fails would leave there."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, ...]]:
    """Every step body passes at once, doing nothing but say what it was asked; regression runs are recorded as
    ("regression", expect, pytest args, sample, companions, the cache's root)."""
    calls: list[tuple] = []

    def regression(trees, run, workspace, console=None) -> int:
        calls.append(
            ("regression", run.expect, list(run.pytest_args), run.sample, run.companions, workspace.cache.root)
        )
        return 0

    def named(name: str):  # type: ignore[no-untyped-def]
        return lambda *args, **kwargs: calls.append((name,)) or True

    monkeypatch.setattr(testsuite, "ensure_venv", lambda: tmp_path / "python")
    monkeypatch.setattr(testsuite, "run_regression_tests", regression)
    monkeypatch.setattr(testsuite, "_pinned_trees_step", named("pinned trees"))
    monkeypatch.setattr(testsuite, "_lint", named("lint"))
    monkeypatch.setattr(testsuite, "_tooling_step", named("tooling"))
    monkeypatch.setattr(testsuite, "check_wheels", named("wheels"))
    monkeypatch.setattr(
        testsuite, "_upstream_merged_step", lambda workspace, env, pin: calls.append((pin.label,)) or True
    )
    monkeypatch.setattr(testsuite, "_overlay_step", named("overlays"))
    monkeypatch.setattr(testsuite, "_pinned_trees", lambda workspace: ({}, {}))
    return calls


def _step_argv(step: Step) -> list[str]:
    """What the scheduler would run, as arguments of the command line (after ``python -m patchset``)."""
    assert step.argv[1:5] == ("-m", "patchset", "test", "--step")
    return list(step.argv[3:])


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_each_planned_step_runs_its_own_body(recorded, tmp_path, quick):
    steps = testsuite.plan(_workspace(tmp_path), quick)
    assert len(EVERY_STEP) == 10 and [step.name for step in steps] == (QUICK_STEPS if quick else EVERY_STEP)
    e2e = ["--ignore", str(testsuite.REPO_ROOT / "tests" / "regression" / "test_engine_e2e.py")]
    # one run per tree set: the fix run, after teeth, includes the comparisons with teeth's record
    # the fix run, beside teeth, waits at most 2/3 of a run's limit for teeth's record
    selected = {"teeth": [], "fix": ["--baseline-wait", f"{scaled(SUITE_LIMIT_S) * 2 / 3:g}"]}
    for step in steps:
        recorded.clear()
        assert main(_step_argv(step)) == 0
        if step.name in selected:
            ((kind, expect, args, sample, companions, cache),) = recorded
            assert (kind, expect) == ("regression", "bug" if step.name == "teeth" else "fixed")
            assert args == [*(e2e if quick else []), *selected[step.name]]  # quick: without the e2e module
            assert companions is not quick
            assert sample  # one batch shape per test, loss and mode, on both sides (every case: apply.sh)
            assert cache == (tmp_path / "cache").resolve()  # the companion verl is fetched into the step's cache
        else:
            assert recorded == ([] if step.name == "environment" else [(step.name,)])


def test_no_step_waits_for_teeth_but_fix_reads_its_record_when_complete_and_nothing_runs_without_the_pins(tmp_path):
    steps = {step.name: step for step in testsuite.plan(_workspace(tmp_path), quick=False)}
    assert not any(step.after for step in steps.values())
    quick = {step.name: step for step in testsuite.plan(_workspace(tmp_path), quick=True)}
    assert quick["fix"].after == ("teeth",)  # --quick: one at a time
    assert steps["environment"].stream and steps["environment"].needs == steps["pinned trees"].needs == ()
    assert steps["lint"].needs == ("environment",)
    for name in EVERY_STEP[3:]:
        assert set(steps[name].needs) == {"environment", "pinned trees"}, name


@pytest.mark.parametrize("verdict", [0, 1], ids=["passed", "failed"])
def test_teeth_marks_its_record_complete_as_it_ends_passed_or_not(recorded, monkeypatch, tmp_path, verdict):
    """fix's comparisons wait for this file: a teeth step that failed must not leave them waiting to their limit."""
    monkeypatch.setattr(testsuite, "run_regression_tests", lambda trees, run, workspace, console=None: verdict)
    teeth = next(step for step in testsuite.plan(_workspace(tmp_path), quick=False) if step.name == "teeth")
    done = (tmp_path / "cache").resolve() / "results" / BASELINE_DONE_FILE

    assert main(_step_argv(teeth)) == verdict
    assert done.exists()


@pytest.mark.parametrize("jobs", [1, 2])
def test_steps_running_at_once_share_the_cores_among_their_workers(monkeypatch, tmp_path, jobs):
    """Regression and overlay steps (workers that import torch, verl and Trinity) get the cores divided by the
    steps running at once; the tooling tests and the wheels keep their own default, verl 0.9.1 and 0.7.1 run one
    process each; PATCHSET_WORKERS wins."""
    monkeypatch.delenv("PATCHSET_WORKERS", raising=False)
    monkeypatch.setattr(testsuite.os, "cpu_count", lambda: 4)
    steps = {step.name: dict(step.env) for step in testsuite.plan(_workspace(tmp_path), quick=False, jobs=jobs)}
    alone = {"verl 0.9.1", "verl 0.7.1"}  # one process each: short runs beside the other steps
    workers = {name: env.get("PATCHSET_WORKERS") for name, env in steps.items()}
    shared = {name for name, count in workers.items() if count and name not in alone}
    assert shared == {"teeth", "overlays", "fix"}
    assert all(workers[name] == str(4 // jobs) for name in shared)
    assert all(workers[name] == "1" for name in alone)
    monkeypatch.setenv("PATCHSET_WORKERS", "3")
    plan = testsuite.plan(_workspace(tmp_path), quick=False, jobs=jobs)
    assert not any("PATCHSET_WORKERS" in dict(step.env) for step in plan)


def test_quick_help_names_exactly_what_it_runs(capsys):
    assert main(["test", "--help"]) == 0
    quick_help = " ".join(capsys.readouterr().out.split("--quick", 1)[1].split())
    assert "the environment, the pinned trees, and the regression suite on them" in quick_help
    assert "without the engine end-to-end module or Trinity's legacy-path run" in quick_help
    assert "no lint, tooling tests, wheels, verl 0.9.1 or overlays" in quick_help


@pytest.mark.parametrize(
    ("codes", "exit_code"),
    [((0, 0, 0), 0), ((0, 1, 0), 1), ((2, 0, 0), 2)],
    ids=["all-pass", "a-step-fails", "no-environment"],
)
def test_exit_code_and_summary_follow_the_steps(test_command, capsys, codes, exit_code):
    names = ("environment", "teeth", "fix")
    needs = {"environment": (), "teeth": ("environment",), "fix": ("environment",)}
    steps = [
        Step(name, f"proves {name}", (sys.executable, "-c", f"exit({code})"), needs[name])
        for name, code in zip(names, codes, strict=False)
    ]

    assert test_command(*steps, jobs=2) == exit_code
    header, *rows, total = capsys.readouterr().out.split("=== summary\n", 1)[1].splitlines()
    verdicts = [line.split()[0] for line in rows]
    assert verdicts == ["ok" if code == 0 and codes[0] == 0 else "FAIL" for code in codes]
    assert header.split() == ["wall", "cpu", "step"]
    assert total.startswith("  total ") and "s of CPU (up to 2 steps at a time)" in total


def test_the_suite_fork_server_starts_in_the_environment_of_the_steps_it_serves(monkeypatch, test_command):
    """Torch takes its thread count from the environment it is imported in, the server's: started without the steps'
    ``OMP_NUM_THREADS=1``, every run it forked computed on two threads and forked its ranks from a fresh interpreter
    (a warm server needs one thread), about 60 s of CPU more per test command."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    given: dict[str, str] = {}
    monkeypatch.setattr(testsuite, "ensure_venv", lambda: Path(sys.executable))
    monkeypatch.setattr(
        testsuite.SuiteForkServer, "start", lambda self, python, root, environ=None: given.update(environ or {})
    )

    step_threads = "import os; exit(os.environ['OMP_NUM_THREADS'] != '1')"
    teeth = Step("teeth", "proves teeth", (sys.executable, "-c", step_threads), (), env=((SOCKET_VARIABLE, "x"),))

    assert test_command(teeth) == 0
    assert given.get("OMP_NUM_THREADS") == "1"


@pytest.mark.parametrize(("threads", "required"), [(None, "required"), ("4", "")], ids=["default", "users-threads"])
def test_the_steps_require_a_warm_fork_server_on_one_thread(monkeypatch, test_command, threads, required):
    """On one thread (the test command's default) a suite run that cannot fork its ranks from itself fails, saying
    why (tests/regression/conftest.py); with the threads a user asked for, the fresh fork server is legitimate."""
    if threads is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.delenv(WARM_SERVER_VARIABLE, raising=False)
    check = f"import os; exit(os.environ.get({WARM_SERVER_VARIABLE!r}, '') != {required!r})"

    assert test_command(Step("teeth", "proves teeth", (sys.executable, "-c", check), ())) == 0


def test_byte_compiling_the_project_leaves_its_checkout_as_git_sees_it():
    def status() -> str:
        command = ["git", "status", "--porcelain", "--untracked-files=all"]
        return subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout

    before = status()
    testsuite._compile_project()

    assert status() == before
    assert (REPO_ROOT / "patchset" / "testcommand" / "__pycache__").is_dir()


def test_the_overlay_run_on_a_release_leaves_out_the_patches_no_piece_mirrors_there(tmp_path: Path):
    """The overlays step runs the teeth of the patches that apply to pip-installed verl 0.9.1 and 0.7.1, with the
    overlays on: a patch whose parts.toml says no overlay piece mirrors it would fail there by design, and is left
    out; every patch of the verl and verl-0.7 series has its piece (verl-0.7 0003 to 0007: mini-batch-statistics)
    but verl 0009, a test only.
    """
    patches = Path(testsuite.REPO_ROOT) / "patches"
    line = [patch.name for patch in testsuite.load_series(patches, "verl-0.7").patches]
    verl = [patch.name for patch in testsuite.load_series(patches, "verl").patches]
    unmirrored = line[-1]
    folder = tmp_path / "verl-0.7"
    folder.mkdir()
    parts = (patches / "verl-0.7" / "parts.toml").read_text(encoding="utf-8")
    table = f"[{unmirrored[5:].removesuffix('.patch')}.missing]\n"
    (folder / "parts.toml").write_text(parts.replace(table, f'{table}overlay = "no piece here"\n'), encoding="utf-8")

    assert testsuite.without_overlay(folder, line) == {unmirrored: "no piece here"}
    assert testsuite.without_overlay(patches / "verl-0.7", line) == {}
    # but a patch that only adds an upstream test: it installs nothing
    assert set(testsuite.without_overlay(patches / "verl", verl)) == {verl[8]}


def test_a_clone_patched_for_a_release_step_takes_the_runs_own_series(tmp_path: Path) -> None:
    """The wheel check of a release installed alone, and the partial-target step, compare with a fresh clone patched
    as a user patches one: with the run's ``--patches-dir`` (and ``--cache``). Here a series of one fake patch on a
    fake verl 0.8.0; the wheel check once applied the repository's own series instead, which fails on this tree."""
    from patchset_fakes import UPSTREAM_MERGED_PATCH, make_repo, make_upstream_merged_patches, verl_files

    from patchset.testcommand.releases import patched_clone

    patches = make_upstream_merged_patches(tmp_path / "patches")
    vanilla = make_repo(tmp_path / "verl-0.8.0", verl_files("0.8.0"))
    workspace = resolve_workspace(patches, str(tmp_path / "cache"), {})
    said = patched_clone(vanilla, tmp_path / "clone", workspace, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert f"* Applying {UPSTREAM_MERGED_PATCH} (1/1)" in said
