"""Every command reports a failure as one ``error:`` line on stderr and its documented exit status."""

from __future__ import annotations

import signal

import pytest

from patchset.cli.exits import EXIT_INTERRUPTED, run_reporting_errors
from patchset.plumbing import gitops, signals
from patchset.plumbing.errors import EXIT_BAD_INPUT, DoesNotApply


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
    with pytest.raises(ValueError):
        run_reporting_errors(_raise(ValueError("a bug")), other_errors={RuntimeError: 1})
