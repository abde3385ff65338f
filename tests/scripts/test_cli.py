"""The command line: help documents the exit codes, usage errors are exit 2, and scripts/apply.sh runs the
same entry point from any directory."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from patchset.cli.apply import main
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


def test_the_command_table_is_what_help_lists_and_where_each_command_goes(capsys, monkeypatch):
    """``python -m patchset --help`` lists every command of ``COMMANDS`` with its help, in order, and each command
    reaches the module the table names: with the rest of the line, or the whole line for the top-level parser."""
    import patchset.cli

    monkeypatch.setenv("COLUMNS", "200")  # one line per command
    assert patchset.cli.main(["--help"]) == 0
    listed = capsys.readouterr().out
    positions = [listed.index(f"    {name}") for name in patchset.cli.COMMANDS]
    assert positions == sorted(positions)
    for command in patchset.cli.COMMANDS.values():
        assert command.help in listed
    calls = []
    for name, command in patchset.cli.COMMANDS.items():
        module = importlib.import_module(command.module)
        monkeypatch.setattr(module, "main", lambda argv, module=module: calls.append((module.__name__, argv)) or 0)
        assert patchset.cli.main([name, "--x"]) == 0
        top = command.module == patchset.cli.TOP_LEVEL
        assert calls.pop() == (command.module, [name, "--x"] if top else ["--x"])


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
