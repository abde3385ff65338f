"""The patched files pass each upstream's own lint gates, with the upstream's own settings.

verl: ruff 0.12.2 (check and format) with the pyproject.toml of the tree under test. Trinity-RFT: black
23.7.0 (its pyproject.toml), isort 5.12.0 ``--profile black`` and flake8 6.1.0 with flake8-docstrings and the
options of Trinity's pre-commit hook. Only the files the series touches are checked, as upstream's pre-commit
checks a PR's changed files. These gates say nothing about vanilla trees, so they run on patched trees only, and
not on the files of a patch that the series skips because upstream has it (that code is upstream's, not ours).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
FLAKE8_ARGS = [
    "--max-line-length=100",
    "--select=C,E,F,W,B,B950",
    "--ignore=E203,E266,E501,W503",
    "--docstring-convention=google",
]


def _series_names(series_name: str) -> list[str]:
    from patchset.series.model import load_series

    return [patch.name for patch in load_series(REPO_ROOT / "patches", series_name).patches]


def _touched_python_files(series_name: str, skipped: Collection[str] = ()) -> list[str]:
    """The Python files the series' patches touch, leaving out the patches named in ``skipped``."""
    series_dir = REPO_ROOT / "patches" / series_name
    names = [name for name in _series_names(series_name) if name not in skipped]
    touched: list[str] = []
    for name in names:
        for match in re.finditer(r"^diff --git a/(\S+) b/(\S+)$", (series_dir / name).read_text(), re.MULTILINE):
            if match.group(2).endswith(".py") and match.group(2) not in touched:
                touched.append(match.group(2))
    assert touched, f"series {series_name} touches no Python file"
    return touched


def _run_tool(module: str, args: list[str], cwd: Path) -> None:
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{module} {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.fixture(autouse=True)
def _patched_trees_only(expect):
    if expect != "fixed":
        pytest.skip("upstream lint gates apply to patched trees")


def _require_source_checkout(tree: Path) -> None:
    """An installed package (a site-packages folder: a patched wheel) has no pyproject.toml and not all the files the
    series touches; the upstream gates judge the source, so they are skipped there."""
    if not (tree / "pyproject.toml").is_file():
        pytest.skip(f"{tree} is an installed package, not a source checkout: upstream lint runs on source trees")


def test_verl_patch_passes_ruff_with_verls_settings(verl_tree, verl_upstream_skips, verl_version, verl_series):
    _require_source_checkout(verl_tree)
    if set(_series_names(verl_series)) <= set(verl_upstream_skips):
        reasons = ", ".join(f"{skip.patch} ({skip.reason})" for skip in verl_upstream_skips.values())
        pytest.skip(f"on verl {verl_version} the series skips every patch: {reasons}; upstream's code is not ours")
    files = _touched_python_files(verl_series, skipped=verl_upstream_skips)
    config = ["--config", str(verl_tree / "pyproject.toml")]

    _run_tool("ruff", ["check", *config, *files], verl_tree)
    _run_tool("ruff", ["format", "--check", *config, *files], verl_tree)


def test_trinity_patch_passes_black_isort_and_flake8_with_trinitys_settings(trinity_tree):
    _require_source_checkout(trinity_tree)
    files = _touched_python_files("trinity")

    _run_tool("black", ["--check", "--config", str(trinity_tree / "pyproject.toml"), *files], trinity_tree)
    _run_tool("isort", ["--profile", "black", "--check-only", *files], trinity_tree)
    _run_tool("flake8", [*FLAKE8_ARGS, *files], trinity_tree)
