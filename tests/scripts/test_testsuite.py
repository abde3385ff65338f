"""The test command runs the steps its help names: all of them, or with --quick the pinned trees and the
regression suite only, each timed in the summary. Every step is replaced by a recorder here (the real ones take
minutes and are what the test command itself runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import testsuite

EVERY_STEP = [
    "environment",
    "lint",
    "pinned trees",
    "tooling tests",
    "teeth (vanilla)",
    "fix (patched)",
    "patched wheels",
    "verl 0.9.1",
    "overlays",
]
QUICK_STEPS = ["environment", "pinned trees", "teeth (vanilla)", "fix (patched)"]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, list[str], bool, bool]]:
    """Every step passes at once, doing nothing; the list holds each regression run: (expect, pytest args, sample,
    companions)."""
    runs: list[tuple[str, list[str], bool, bool]] = []

    def regression(trees, expect, baseline_dir=None, pytest_args=(), sample=False, companions=True) -> int:
        runs.append((expect, list(pytest_args), sample, companions))
        return 0

    monkeypatch.setattr(testsuite, "ensure_venv", lambda: tmp_path / "python")
    monkeypatch.setattr(testsuite, "_run", lambda command, env=None: True)
    monkeypatch.setattr(testsuite, "run_regression_tests", regression)
    monkeypatch.setattr(testsuite, "check_wheels", lambda *args, **kwargs: True)
    monkeypatch.setattr(testsuite, "_upstream_merged_step", lambda *args, **kwargs: True)
    monkeypatch.setattr(testsuite, "_overlay_step", lambda *args, **kwargs: True)
    monkeypatch.setattr(testsuite, "_pinned_trees", lambda cache: ({}, {}))
    monkeypatch.setattr(testsuite, "parallel_args", lambda python, dist="loadfile": [])
    return runs


def _steps_run(capsys: pytest.CaptureFixture[str], argv: list[str], cache: Path) -> list[str]:
    assert testsuite.main([*argv, "--cache", str(cache)]) == 0
    summary = capsys.readouterr().out.split("=== summary\n", 1)[1].splitlines()
    steps = [line.split(None, 2)[2] for line in summary if line.startswith("  ok")]
    return [next(name for name in EVERY_STEP if step.startswith(name)) for step in steps]


def test_every_step_runs_and_is_timed_in_the_summary(recorded, capsys, tmp_path):
    assert _steps_run(capsys, [], tmp_path / "cache") == EVERY_STEP
    assert recorded == [("bug", [], True, True), ("fixed", [], False, True)]  # teeth sampled, the fix every case


def test_quick_runs_exactly_the_steps_its_help_names(recorded, capsys, tmp_path):
    assert _steps_run(capsys, ["--quick"], tmp_path / "cache") == QUICK_STEPS
    assert [(expect, sample, companions) for expect, _, sample, companions in recorded] == [
        ("bug", True, False),
        ("fixed", True, False),
    ]
    assert all(args[0] == "--ignore" and args[1].endswith("test_engine_e2e.py") for _, args, _, _ in recorded)
    with pytest.raises(SystemExit):
        testsuite.main(["--help"])
    quick_help = " ".join(capsys.readouterr().out.split("--quick", 1)[1].split())
    assert "the pinned trees and the regression suite on them" in quick_help
    assert "without the engine end-to-end module or Trinity's legacy-path run" in quick_help
    assert "no lint, tooling tests, wheels, verl 0.9.1 or overlays" in quick_help
