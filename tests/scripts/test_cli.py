"""The command line: help documents the exit codes, usage errors are exit 2, and scripts/apply.sh runs the
same entry point from any directory."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from patchset.cli import main
from patchset.cli.startup import Run
from patchset.plumbing.errors import BadInput
from patchset.plumbing.paths import REPO_ROOT


def test_apply_help_documents_exit_codes(capsys):
    assert main(["apply", "--help"]) == 0
    out = capsys.readouterr().out
    for line in (
        "0  done",
        "1  the regression tests failed",
        "2  bad input",
        "3  a patch does not apply",
        "130, 143, 129  interrupted by SIGINT (Ctrl-C), SIGTERM or SIGHUP",
    ):
        assert line in out
    options = ("--check", "--reverse", "--no-test", "--force-version", "--allow-dirty", "--3way", "--cache")
    for option in (*options, "--patches-dir"):
        assert option in out


@pytest.mark.parametrize("argv", [[], ["apply", "--no-such-option"], ["frobnicate"]])
def test_usage_errors_exit_2(capsys, argv):
    assert main(argv) == 2


def test_the_command_table_is_what_help_lists_and_each_command_registers_into_the_top_level_parser(capsys, monkeypatch):
    """``python -m patchset --help`` lists every command of ``COMMANDS`` with its help, in order; each command's module
    registers its parser into the top-level one, whose run gets the parsed line, and a command's own ``--help`` is
    that parser's."""
    import patchset.cli

    monkeypatch.setenv("COLUMNS", "200")  # one line per command
    assert patchset.cli.main(["--help"]) == 0
    listed = capsys.readouterr().out
    positions = [listed.index(f"    {name}") for name in patchset.cli.COMMANDS]
    assert positions == sorted(positions)
    for command in patchset.cli.COMMANDS.values():
        assert command.help in listed
    for name, command in patchset.cli.COMMANDS.items():
        commands = argparse.ArgumentParser(prog="python -m patchset").add_subparsers(dest="command")
        run = importlib.import_module(command.module).register(commands, name, command.help)
        assert isinstance(run, Run) and name in commands.choices
        assert patchset.cli.main([name, "--help"]) == 0
        assert capsys.readouterr().out == commands.choices[name].format_help()


def test_each_command_is_reported_once_by_the_top_level_entry_point(capsys, monkeypatch):
    """The handler of the command named gets the parsed line and its status is the exit status; an error it raises
    becomes one ``error:`` line, reported by the one wrapper of the run."""
    import patchset.cli
    from patchset.cli import fetch

    seen = []
    monkeypatch.setattr(fetch, "cmd_fetch", lambda args, console, guard: seen.append(args.all) or 7)
    assert patchset.cli.main(["fetch", "--all"]) == 7
    assert seen == [True]
    monkeypatch.setattr(fetch, "cmd_fetch", lambda args, console, guard: (_ for _ in ()).throw(BadInput("no")))
    assert patchset.cli.main(["fetch"]) == 2
    assert capsys.readouterr().err == "error: no\n"


def test_missing_patches_dir_exits_2(capsys, tmp_path):
    assert main(["apply", "--patches-dir", str(tmp_path / "none"), "--check", str(tmp_path)]) == 2
    assert "upstreams.toml not found" in capsys.readouterr().err


def test_apply_sh_help_runs_end_to_end_from_another_directory(tmp_path):
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "apply.sh"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m patchset apply" in proc.stdout
    assert "exit status:" in proc.stdout


def test_apply_sh_reads_relative_paths_from_where_it_was_started(tmp_path):
    """The wrapper runs from the repository root, and ``-C`` takes the line back to the user's folder."""
    (tmp_path / "empty").mkdir()
    proc = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "apply.sh"), "--check", "empty"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: empty is not a verl or Trinity-RFT checkout (no verl/version/version or trinity/__init__.py)"
    )


def test_a_missing_c_directory_is_one_error_line_exit_2(capsys, tmp_path):
    assert main(["-C", str(tmp_path / "absent"), "apply", "--help"]) == 2
    assert capsys.readouterr().err == f"error: -C {tmp_path / 'absent'}: No such file or directory\n"


def test_python_m_patchset_exits_with_main_status(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "patchset", "apply", "--check", "--patches-dir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and str(tmp_path) in proc.stderr


def test_a_failed_pip_in_lock_is_one_error_line_exit_1_not_an_internal_error(capsys, monkeypatch):
    """``lock``'s own error, pip failing, reaches main's one error path through the command's `Run.other_errors`."""
    from patchset.testenv import lock

    def pip_fails(*args: object) -> None:
        raise subprocess.CalledProcessError(1, ["pip", "install"])

    monkeypatch.setattr(lock, "lock", pip_fails)
    assert main(["lock"]) == 1
    assert capsys.readouterr().err == "error: Command '['pip', 'install']' returned non-zero exit status 1.\n"
