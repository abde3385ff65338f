"""The registry drives every per-upstream choice of the tooling: an upstream added to ``UPSTREAMS`` alone is offered by
the command line, linted in its own PR-title form, gated by its own hooks, given its PR template and tested beside
the upstream its tests import; and the entries that exist are complete."""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest

from patchset import cli
from patchset.cli import export_pr, lint_hook
from patchset.export import pr_gates, pr_text
from patchset.series.lint import subject_problem
from patchset.testenv import regression
from patchset.upstreams.lint_hooks import RUNNER, LintHook
from patchset.upstreams.registry import UPSTREAMS, SubjectForm


@pytest.fixture
def third(monkeypatch: pytest.MonkeyPatch) -> str:
    """A third upstream, registered only in ``UPSTREAMS``: its tests import verl; its own form, hook and template."""
    entry = dataclasses.replace(
        UPSTREAMS["trinity"],
        key="third",
        title="Third",
        subject_form=SubjectForm(re.compile(r"^THIRD: \S"), "THIRD: description"),
        lint_hooks=(LintHook("lint-third", "third's linter", ("thirdlint", "--strict")),),
        pr_template=UPSTREAMS["verl"].pr_template,
        tests_import_note="Third imports verl",
    )
    monkeypatch.setitem(UPSTREAMS, "third", entry)
    return "third"


def test_export_pr_offers_the_registrys_upstreams(third: str) -> None:
    commands = argparse.ArgumentParser().add_subparsers()
    export_pr.register(commands, "export-pr", "")
    parser = commands.choices["export-pr"]
    choices = next(action.choices for action in parser._actions if action.dest == "upstream")

    assert list(choices) == ["verl", "trinity", third]


def test_a_registered_upstream_gets_its_subject_form_hooks_and_template(third: str) -> None:
    assert subject_problem(third, "THIRD: fix the loss") is None
    assert "THIRD: description" in (subject_problem(third, "[trainer] fix: the loss") or "")
    assert "[area] description" in (subject_problem("unregistered", "no area") or "")

    (hook,) = pr_gates.precommit_config(third, Path("/venv/bin/python"))["repos"][0]["hooks"]  # type: ignore[index]
    assert hook == {
        "id": "lint-third",
        "name": "third's linter",
        "entry": "/venv/bin/thirdlint --strict",
        "language": "system",
    }
    patch = SimpleNamespace(name="0001-third-fix.patch", subject="THIRD: fix the loss", fields={})
    gates = pr_gates.Gates(pr_gates.LintResult(True, (), ""), pr_gates.TestRun((), (), True, "ok"))
    body = pr_text.pr_body(third, "v1", [patch], ["a.py"], gates)  # type: ignore[list-item]
    assert body.startswith("### What does this PR do?\n")  # verl's template, as its entry says
    assert "- `pre-commit run` on the changed files (): passed." in body


def test_a_registered_upstream_whose_tests_import_verl_is_run_beside_it(third: str, tmp_path: Path) -> None:
    trees = {third: tmp_path / "third"}

    assert regression.imported_only(trees) == ["verl"]
    assert regression.imported_only({**trees, "verl": tmp_path / "verl"}) == []
    env = regression.regression_env(
        {**trees, "verl": tmp_path / "verl"}, "fixed", None, regression.imported_only(trees)
    )
    assert env["PATCHSET_VERL_ROLE"] == "dependency"


def test_every_registry_entry_is_complete() -> None:
    """What the tooling looks up for each entry exists: a role variable for each upstream another imports, a PR
    template, lint hooks that each run a tool or a check of this project's own, and what is not run said."""
    for upstream in UPSTREAMS.values():
        assert upstream.pr_template is not None, upstream.key
        assert upstream.lint_hooks and upstream.lint_not_run, upstream.key
        assert all(bool(hook.command) != (hook.check is not None) for hook in upstream.lint_hooks), upstream.key
        for other in upstream.tests_import:
            assert UPSTREAMS[other].role_variable, f"{upstream.key} imports {other}, which has no role variable"
            assert upstream.tests_import_note and upstream.companion_note, upstream.key


@pytest.mark.parametrize(
    ("key", "hook_id", "text", "problem"),
    [
        ("verl", "check-license", "X = 1\n", "a.py: no '# Copyright <year> <holder>' line"),
        ("verl", "check-docstrings", "def f():\n    pass\n", "a.py:1: public f has no docstring"),
        ("trinity", "check-ast", "def (:\n", "a.py:1: invalid syntax"),
        ("trinity", "check-yaml", "a: [\n", "a.py: while parsing"),
        ("trinity", "end-of-file-fixer", "X = 1\n\n", "a.py: must end with exactly one newline"),
    ],
)
def test_an_own_hook_runs_by_the_command_line_its_generated_config_names(
    key: str, hook_id: str, text: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """pre-commit runs a check of this project's own by the entry the generated config gives it, in the tree."""
    hooks = pr_gates.precommit_config(key, Path("/venv/bin/python"))["repos"][0]["hooks"]  # type: ignore[index]
    python, flag, *argv = shlex.split(next(hook["entry"] for hook in hooks if hook["id"] == hook_id))
    assert (python, flag, argv) == ("/venv/bin/python", "-m", [*RUNNER, key, hook_id])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(text)

    assert cli.main([*argv[1:], "a.py"]) == lint_hook.EXIT_PROBLEMS

    assert problem in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["verl", "check-ast"], ["trinity", "nosuch"], ["third-party", "check-ast"]])
def test_a_hook_that_is_not_the_upstreams_own_check_is_a_usage_error_exit_2(argv: list[str], capsys) -> None:
    assert cli.main(["lint-hook", *argv]) == 2
    err = capsys.readouterr().err
    assert "error: argument" in err and "Traceback" not in err
