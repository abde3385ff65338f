"""Remembered gate passes: keyed by every input's content, none for a tree that is not pinned by its commit."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from patchset import cli
from patchset.export import gate_record, pr_export, pr_gates
from patchset.testenv import venv
from tests.scripts.patchset_fakes import git, make_repo


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("repos")
    make_repo(base / "branch", {"pkg/mod.py": "X = 1\n", "tests/test_mod.py": "def test(): pass\n"})
    make_repo(base / "companion", {"dep.py": "Y = 2\n"})
    return base


@pytest.fixture
def inputs(repos: Path, tmp_path: Path) -> dict[str, Path]:
    branch = shutil.copytree(repos / "branch", tmp_path / "branch", symlinks=True)
    companion = shutil.copytree(repos / "companion", tmp_path / "companion", symlinks=True)
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    (tmp_path / "venv" / gate_record.VENV_STAMP).write_text("lock-sha\n")
    code = tmp_path / "gates.py"
    code.write_text("# the gate\n")
    return {"branch": branch, "companion": companion, "python": python, "code": code}


def _key(inputs: dict[str, Path], args: tuple[str, ...] = ("tests/test_mod.py",)) -> str | None:
    trees = (inputs["branch"], inputs["companion"])
    return gate_record.gate_key("tests", trees, inputs["python"], args, (inputs["code"],))


def test_the_stamp_name_is_the_one_the_venv_build_writes():
    assert gate_record.VENV_STAMP == venv.STAMP_NAME


def test_the_same_inputs_give_the_same_key_and_a_pass_is_recalled(inputs, tmp_path):
    key = _key(inputs)
    assert key is not None and key == _key(inputs)
    assert gate_record.recall(tmp_path / "records", key) is None
    gate_record.remember(tmp_path / "records", key, "1 passed in 0.1s", "output")
    assert gate_record.recall(tmp_path / "records", key).summary == "1 passed in 0.1s"
    assert [p.name for p in (tmp_path / "records").iterdir()] == [f"{key}.json"]  # no temporary left


@pytest.mark.parametrize(
    "change",
    ["commit in the branch", "commit in a companion", "another lock", "other arguments", "other gate code"],
)
def test_any_changed_input_gives_another_key(inputs, change):
    before = _key(inputs)
    args: tuple[str, ...] = ("tests/test_mod.py",)
    if change.startswith("commit"):
        tree = inputs["branch" if "branch" in change else "companion"]
        (tree / "new.py").write_text("Z = 3\n")
        git(tree, "add", "-A")
        git(tree, "commit", "-qm", "more")
    elif change == "another lock":
        (inputs["python"].parent.parent / gate_record.VENV_STAMP).write_text("other-lock\n")
    elif change == "other arguments":
        args = ("tests/test_mod.py", "-k", "x")
    else:
        inputs["code"].write_text("# the gate, changed\n")
    assert _key(inputs, args) not in (None, before)


@pytest.mark.parametrize("state", ["edited", "untracked file", "not the top level", "not git", "no venv stamp"])
def test_a_tree_or_venv_not_pinned_by_content_has_no_key_and_nothing_is_remembered(inputs, tmp_path, state):
    if state == "edited":
        (inputs["branch"] / "pkg/mod.py").write_text("X = 2\n")
    elif state == "untracked file":
        (inputs["companion"] / "extra.py").write_text("")
    elif state == "not the top level":
        inputs["branch"] = inputs["branch"] / "pkg"
    elif state == "not git":
        inputs["companion"] = tmp_path / "venv"
    else:
        (inputs["python"].parent.parent / gate_record.VENV_STAMP).unlink()
    assert _key(inputs) is None
    gate_record.remember(tmp_path / "records", None, "1 passed", "")
    assert not (tmp_path / "records").exists()


def test_an_unreadable_record_counts_as_none(inputs, tmp_path):
    key = _key(inputs)
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / f"{key}.json").write_text('{"summary": ')
    assert gate_record.recall(tmp_path / "records", key) is None


def test_a_test_gate_that_passed_is_reused_on_the_same_tree_and_a_failure_runs_every_time(repos, tmp_path):
    tree = shutil.copytree(repos / "branch", tmp_path / "branch", symlinks=True)
    python, records = Path(sys.executable), tmp_path / "records"  # this venv, with the lock stamp its build wrote
    if not (python.parent.parent / gate_record.VENV_STAMP).is_file():
        pytest.skip("not run from the test venv (no lock stamp): no key can be made")
    first = pr_gates.run_tests(tree, ["tests/test_mod.py"], python, [tree], records)
    again = pr_gates.run_tests(tree, ["tests/test_mod.py"], python, [tree], records)
    assert first[0] and "not run again" not in first[1]
    assert again[0] and again[1].startswith(first[1]) and "not run again (--rerun-gates runs it)" in again[1]
    (tree / "tests/test_mod.py").write_text("def test(): assert False\n")
    git(tree, "commit", "-qam", "break it")
    for _ in range(2):
        passed, summary, _output = pr_gates.run_tests(tree, ["tests/test_mod.py"], python, [tree], records)
        assert not passed and "1 failed" in summary and "not run again" not in summary


@pytest.mark.parametrize("rerun", [False, True])
def test_export_pr_reuses_passes_from_the_cache_unless_told_to_rerun_the_gates(monkeypatch, tmp_path, rerun):
    seen: dict[str, object] = {}
    monkeypatch.setattr(pr_export, "export_pr", lambda request, workspace, console: seen.update(request=request) or 0)
    argv = ["verl", str(tmp_path), "--cache", str(tmp_path / "cache"), *(["--rerun-gates"] if rerun else [])]
    assert cli.main(["export-pr", *argv]) == 0
    assert seen["request"].gate_records == (None if rerun else (tmp_path / "cache" / "gates").resolve())
