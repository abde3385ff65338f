"""Child processes start safely and every wait is bounded (`patchset.plumbing.children`, `bounded`).

Invariants: a child started after the parent ran a parallel CPU op still runs its own parallel ops (the plain fork
the tests used before waits forever in OpenMP's barrier: shown here, not assumed); a warm server is a fork of its
caller made before the caller computed, imports the first preload asked of it, ends with its caller, and is not made
beside another thread; nothing else in the tree starts a
Python child; a hung child, a hung pytest run and a hung step of the test command each end within their limit, name
what hung and keep its stacks, and the run reports exit 124.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from patchset.plumbing import children
from patchset.plumbing.bounded import RUNNING_DIR_VARIABLE, Limit, run_bounded, running_tests
from patchset.plumbing.children import run_children
from patchset.plumbing.errors import EXIT_TIMED_OUT, TimedOut
from patchset.plumbing.limits import scaled
from patchset.plumbing.stacks import is_running
from patchset.testcommand.scheduler import Scheduler, Step

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SLACK_S = 30.0  # a hang's report: py-spy reads each stack (well under a second each) and the server starts once
# a hung pytest run's limit: pytest and its workers reach the test in 2 to 3 s on this machine alone, and took over
# 10 s beside three steps of the test command and another job (PATCHSET_TIME_SCALE raises it on a slower or busier
# one, as it does every limit)
PYTEST_LIMIT_S = 15


@pytest.fixture(scope="module")
def after_openmp() -> dict:
    """A child started each way after the parent ran a parallel op (`fork_after_openmp.py`, one process: torch
    imported once for both)."""
    # PASSIVE: OpenMP's threads, and the fork waiting for one that is gone, sleep instead of spinning (the same hang,
    # in the same frames; 3.6 CPU-s instead of 11.5)
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, str(HERE / "fork_after_openmp.py")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_plain_fork_after_a_parallel_op_waits_forever_in_openmp(after_openmp):
    outcome = after_openmp["fork"]

    assert not outcome["finished"], "the fork finished: this machine's OpenMP no longer shows the hang"
    frames = outcome["stack"].split("Thread", 1)[1].splitlines()[1:]
    assert "libgomp" in frames[0], outcome["stack"]  # waiting inside OpenMP, for a thread the fork did not copy
    assert any("repeat_interleave" in frame for frame in frames), outcome["stack"]


def test_a_child_of_the_one_place_runs_its_parallel_op_after_the_parent_ran_one(after_openmp):
    assert after_openmp["children"] == {"finished": True}


def _sleep_forever() -> None:
    time.sleep(3600)


def _fail() -> None:
    raise SystemExit(3)


def _warm_server(how: str, folder: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, str(HERE / "warm_server.py"), how, str(folder)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_a_warm_server_is_a_fork_of_its_caller_that_imports_the_first_preload_asked(tmp_path):
    result = _warm_server("used", tmp_path)

    # the modules shared were imported by the caller itself before the fork (one that does not exist, left alone)
    assert result["started"] and result["shared"] and result["codes"] == [0, 0] and result["refusal"] is None
    for child in result["children"]:
        assert child["parent"] == result["server"] != result["pid"]  # forked by the server, not by the caller
        # the preload asked for was imported in the server; what the caller imported after the fork was not
        assert child["modules"] == {"wave": True, "colorsys": False, "quopri": True}


def test_a_warm_server_never_asked_for_a_child_ends_with_its_caller(tmp_path):
    result = _warm_server("unused", tmp_path)

    assert result["started"]
    deadline = time.monotonic() + 10
    while is_running(result["server"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_running(result["server"]), "the warm server outlived the process that started it"


def test_no_warm_server_beside_another_thread(tmp_path):
    assert _warm_server("threaded", tmp_path) == {
        "started": False,
        "server": None,
        "refusal": "1 other thread(s) run in this process",
    }


def test_a_hung_child_ends_within_its_limit_named_with_its_stack(monkeypatch):
    monkeypatch.delenv("PATCHSET_TIME_SCALE", raising=False)
    started = time.monotonic()
    with pytest.raises(TimedOut) as hung:
        run_children(_sleep_forever, [()], 2, "sleeper", preload=())
    elapsed = time.monotonic() - started

    assert elapsed < 2 + SLACK_S
    message = str(hung.value)
    assert message.startswith(
        "sleeper 0: still running after 2 s, ended (to allow longer: PATCHSET_TIME_SCALE=2 doubles"
    )
    assert "_sleep_forever (" in message  # the child's own stack, read by py-spy
    assert hung.value.exit_code == EXIT_TIMED_OUT
    assert _pids(message) and not [pid for pid in _pids(message) if is_running(pid)]


def test_a_failing_child_ends_the_others_at_once():
    started = time.monotonic()
    codes = run_children(_fail_or_sleep, [(True,), (False,)], 600, "rank", preload=())

    assert codes == [3, -9]
    assert time.monotonic() - started < SLACK_S


def _fail_or_sleep(fail: bool) -> None:
    _fail() if fail else _sleep_forever()


def test_the_time_scale_raises_a_childs_limit(monkeypatch):
    monkeypatch.setenv("PATCHSET_TIME_SCALE", "0.5")
    with pytest.raises(TimedOut, match="still running after 1 s"):
        run_children(_sleep_forever, [()], 2, "sleeper", preload=())


def _pids(report: str) -> list[int]:
    """The processes a hang's report looked at (``--- process PID: ...`` lines of `stacks.dump_stacks`)."""
    return [int(line.split()[2].rstrip(":")) for line in report.splitlines() if line.startswith("--- process ")]


HUNG_SUITE = {
    "conftest.py": "from patchset.plumbing import bounded\n\n\ndef pytest_configure(config):\n"
    "    bounded.register(config)\n",
    "test_hangs.py": "import subprocess\nimport sys\nimport time\n\n\ndef test_passes():\n    pass\n\n\n"
    "def test_waits_for_its_child():\n"
    "    subprocess.run([sys.executable, '-c', 'import time; time.sleep(3600)'])\n",
}


def test_a_hung_pytest_run_names_its_test_ends_its_tree_and_keeps_the_stacks(tmp_path, capsys):
    for name, text in HUNG_SUITE.items():
        (tmp_path / name).write_text(text)
    command = [sys.executable, "-m", "pytest", str(tmp_path), "-q", "-p", "no:cacheprovider", "-n", "2"]
    outer = tmp_path / "outer"  # the folder of a waiter further up, as a step of the test command has
    outer.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), RUNNING_DIR_VARIABLE: str(outer)}
    limit = scaled(PYTEST_LIMIT_S)
    started = time.monotonic()
    with pytest.raises(TimedOut) as hung:
        run_bounded(command, "the hung suite", Limit(limit, "--test-timeout SECONDS"), cwd=tmp_path, env=env)

    assert time.monotonic() - started < limit + SLACK_S
    line = str(hung.value)
    assert "\n" not in line
    assert line.startswith(
        f"the hung suite hung in test_hangs.py::test_waits_for_its_child: still running after {limit:g} s"
    )
    assert "ended (to allow longer: --test-timeout SECONDS); " in line
    report = Path(line.rpartition(" are in ")[2])
    kept = report.read_text()
    assert "test_waits_for_its_child (test_hangs.py:" in kept  # the worker's stack
    assert "time.sleep(3600)" in kept and "<module> (<string>:1)" in kept  # its child's, a process further down
    assert kept in capsys.readouterr().err  # printed too, for a CI log
    # the waiter further up (a step) saw the test too: the worker's file, left by its kill
    assert [path.read_text().strip() for path in outer.iterdir()] == ["test_hangs.py::test_waits_for_its_child"]
    pids = _pids(kept)
    assert len(pids) >= 4 and not [pid for pid in pids if is_running(pid)]  # pytest, its 2 workers, the child: ended
    report.unlink()


def test_a_bounded_run_given_a_file_writes_its_output_and_errors_there(tmp_path):
    command = [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"]
    with (tmp_path / "output.txt").open("w+") as output:
        assert run_bounded(command, "a run beside another", Limit(60, "-"), output=output) == 0
        output.seek(0)
        assert sorted(output.read().split()) == ["err", "out"]


def test_a_file_left_by_a_process_that_ended_names_no_running_test(tmp_path):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / ended.stdout.strip()).write_text("test_gone.py::test_killed\n")
    (tmp_path / str(os.getpid())).write_text("test_here.py::test_running\n")

    assert running_tests(tmp_path) == ["test_here.py::test_running"]


def test_a_hung_step_of_the_test_command_is_ended_and_named(tmp_path, monkeypatch):
    monkeypatch.delenv("PATCHSET_TIME_SCALE", raising=False)
    sleeper = Step("sleeper", "sleeps", (sys.executable, "-c", "import time; time.sleep(3600)"), limit_s=2)
    quick = Step("quick", "ends", (sys.executable, "-c", "pass"))
    out = tmp_path / "out.txt"
    started = time.monotonic()
    with out.open("w") as stream:
        results = Scheduler([sleeper, quick], 2, tmp_path, os.environ, out=stream).run()

    assert time.monotonic() - started < 2 + SLACK_S
    hung, ended = results
    assert hung.timed_out and not hung.passed and ended.passed and not ended.timed_out
    assert hung.note.startswith(
        "step 'sleeper' hung: still running after 2 s, ended (to allow longer: PATCHSET_TIME_SCALE"
    )
    assert "=== sleeper: FAILED in" in out.read_text()
    Path(hung.note.rpartition(" are in ")[2]).unlink()  # the stacks it kept


# Python children started anywhere but the one place; each allowed exception says why it is safe
ALLOWED = {
    "patchset/plumbing/children.py": "the one place",
    "tests/overlay/warm_parent.py": "a fork server of its own: forks only before any computation, as documented",
    "patchset/testenv/suite_fork_server.py": "the suite's fork server: imports only, computes nothing, no thread",
    "tests/scripts/fork_after_openmp.py": "the hang, made on purpose to show it",
}
STARTERS = {"fork", "forkpty", "get_context", "set_start_method", "start_processes", "spawn", "Process", "Pool"}
STARTERS |= {"ProcessPoolExecutor"}


def _starts(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in STARTERS and isinstance(getattr(node, "ctx", None), ast.Load):
            found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {name}")
        if isinstance(node, ast.ImportFrom) and any(alias.name in STARTERS for alias in node.names):
            found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} import {node.module}")
    return found


def test_no_code_but_the_one_place_starts_a_python_child():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    paths = [REPO_ROOT / name for name in tracked.stdout.split() if name not in ALLOWED]

    assert not [start for path in paths for start in _starts(path)]
    assert _starts(REPO_ROOT / "tests/scripts/fork_after_openmp.py")  # the check sees a start where there is one
    assert children.START_METHOD == "forkserver"


def test_apply_whose_regression_run_hangs_exits_124_naming_the_test_with_the_series_applied_whole(
    world, tmp_path, monkeypatch, capsys
):
    from patchset.cli import main
    from patchset.testenv import regression

    suite = tmp_path / "hung-suite"
    suite.mkdir()
    for name, text in HUNG_SUITE.items():
        (suite / name).write_text(text)
    monkeypatch.setattr(regression, "SUITE", suite)
    monkeypatch.setenv("PATCHSET_WORKERS", "1")

    limit = scaled(PYTEST_LIMIT_S)
    code = main(world.args("--test-timeout", f"{limit:g}", str(world.verl)))

    err_lines = capsys.readouterr().err.splitlines()
    assert code == EXIT_TIMED_OUT
    assert err_lines[-1].startswith(f"error: the regression tests (expecting fixed) on verl at {world.verl} hung in ")
    assert f"test_hangs.py::test_waits_for_its_child: still running after {limit:g} s, ended (to allow" in err_lines[-1]
    # as after a failing run: the series is in the tree, whole (it comes out again byte for byte), and no lock is held
    assert main(world.args("--reverse", str(world.verl))) == 0
    assert subprocess.run(["git", "status", "--porcelain"], cwd=world.verl, capture_output=True, text=True).stdout == ""
    Path(err_lines[-1].rpartition(" are in ")[2]).unlink()
