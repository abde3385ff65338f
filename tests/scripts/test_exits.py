"""Every command reports a failure as one ``error:`` line on stderr and its documented exit status; an error nobody
foresaw too, with its own status (70), never a traceback.

The fault test of the last kind runs each command in process with one function it calls made to fail (a
``RuntimeError``, as a bug would raise), and records each case in the fault registry (conftest.py)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from patchset_fakes import tree_state

from patchset import cli
from patchset.cli.exits import EXIT_INTERRUPTED, TRACEBACK_ENV, run_reporting_errors
from patchset.plumbing import gitops, signals
from patchset.plumbing.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, DoesNotApply


def _raise(exc: BaseException):
    def call() -> int:
        raise exc

    return call


def test_a_successful_call_returns_its_own_status(capsys):
    assert run_reporting_errors(lambda: 0) == 0
    assert run_reporting_errors(lambda: 1) == 1
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "exc, status, line",
    [
        (DoesNotApply("0001-x.patch does not apply"), DoesNotApply.exit_code, "error: 0001-x.patch does not apply"),
        (gitops.GitError(["am", "x"], 128, "fatal: bad patch"), EXIT_BAD_INPUT, "error: git am x: fatal: bad patch"),
    ],
)
def test_project_and_git_errors_become_one_line_and_their_status(capsys, exc, status, line):
    assert run_reporting_errors(_raise(exc)) == status
    assert capsys.readouterr().err.splitlines() == [line]


def test_a_signal_reports_the_rollback_outcome_unless_told_otherwise(capsys):
    interrupted = signals.Interrupted(signal.SIGTERM)

    assert run_reporting_errors(_raise(interrupted)) == 128 + signal.SIGTERM
    assert run_reporting_errors(_raise(interrupted), interrupted="no wheel was put into dist") == 143
    assert run_reporting_errors(_raise(KeyboardInterrupt()), interrupted="") == EXIT_INTERRUPTED

    assert capsys.readouterr().err.splitlines() == [
        "error: interrupted by SIGTERM; nothing was changed",
        "error: interrupted by SIGTERM; no wheel was put into dist",
        "error: interrupted",
    ]


def test_other_errors_map_to_the_status_given_for_their_type(capsys):
    class EnvironmentBroken(RuntimeError):
        pass

    assert run_reporting_errors(_raise(EnvironmentBroken("no venv")), other_errors={RuntimeError: 1}) == 1
    assert capsys.readouterr().err.splitlines() == ["error: no venv"]
    assert run_reporting_errors(_raise(ValueError("a bug")), other_errors={RuntimeError: 1}) == EXIT_INTERNAL


def test_an_unforeseen_error_is_one_line_naming_where_and_exit_70(capsys, monkeypatch):
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)

    assert run_reporting_errors(_raise(ValueError("a bug\non two lines"))) == EXIT_INTERNAL == 70

    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: internal error in call (tests/scripts/test_exits.py:")
    assert "ValueError: a bug on two lines" in line and f"{TRACEBACK_ENV}=1 shows the traceback" in line
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    assert run_reporting_errors(_raise(ValueError("a bug"))) == EXIT_INTERNAL
    assert "Traceback (most recent call last)" in capsys.readouterr().err


# command line (the cache and dist folders in {tmp}), and the function of its code made to fail
EVERY_COMMAND = [
    (["apply", "--no-test", "--cache", "{tmp}"], "patchset.apply.job.cached_targets"),
    (["apply", "--check", "{tmp}"], "patchset.apply.job.target_for_path"),
    (["fetch", "--cache", "{tmp}"], "patchset.cli.fetch.ensure_upstream"),
    (["export", "checkout", "verl", "--cache", "{tmp}"], "patchset.cli.export.ensure_upstream"),
    (["export", "export", "verl", "--dry-run", "--cache", "{tmp}"], "patchset.cli.export.plan_export"),
    (["export", "lint"], "patchset.cli.export.lint_patches_dir"),
    (["export-pr", "verl", "{tmp}"], "patchset.export.pr_export.export_pr"),
    (["wheels", "--cache", "{tmp}", "--dist-dir", "{tmp}/dist"], "patchset.cli.wheels.build_wheels"),
    (["wheels", "manifest"], "patchset.cli.wheels.report_manifests"),
    (["broken"], "importlib.import_module"),  # a command whose module fails to import
]


@pytest.mark.parametrize("argv, broken", EVERY_COMMAND, ids=[" ".join(argv[:2]) for argv, _ in EVERY_COMMAND])
def test_every_command_ends_an_unforeseen_error_with_one_line_and_exit_70(
    argv, broken, tmp_path, monkeypatch, capsys, faults
):
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"injected into {broken}")

    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    if argv == ["broken"]:
        monkeypatch.setitem(cli.COMMANDS, "broken", cli.Command("patchset.no_such_module", "fails to import"))
    else:
        monkeypatch.setattr(broken, fail)
    before = tree_state(tmp_path)

    code = cli.main([arg.format(tmp=tmp_path) for arg in argv])

    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    intact = tree_state(tmp_path) == before
    faults.record(f"internal error: {' '.join(argv[:2])}", code, intact=intact, message=errors[-1] if errors else err)
    assert code == EXIT_INTERNAL, err
    assert "Traceback" not in err and len(errors) == 1 and err.endswith(errors[0] + "\n"), err
    assert errors[0].startswith("error: internal error in ")
    assert "injected into" in errors[0] or "No module named 'patchset.no_such_module'" in errors[0]
    assert intact


def test_the_test_command_ends_an_unforeseen_error_with_one_line_and_exit_70(tmp_path, monkeypatch, capsys):
    def fail() -> Path:
        raise RuntimeError("injected into ensure_venv")

    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    monkeypatch.setattr("patchset.testcommand.testsuite.ensure_venv", fail)

    assert cli.main(["test", "--step", "tooling", "--cache", str(tmp_path)]) == EXIT_INTERNAL
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: internal error in ") and "RuntimeError: injected into ensure_venv" in line
