"""Wiring for the regression suite: which upstream trees it tests, and what it expects of them.

`patchset.regression` runs this suite in a child process with the trees under test first on
``sys.path`` and three environment variables:

- ``PATCHSET_VERL_TREE`` / ``PATCHSET_TRINITY_TREE``: the checkouts whose modules the tests import;
- ``PATCHSET_EXPECT``: ``fixed`` for patched trees (the invariants must hold) or ``bug`` for the
  vanilla pinned trees (the same measurements must show the defect: the teeth run);
- ``PATCHSET_VERL_ROLE=dependency`` when the verl tree is there only because Trinity imports it (a Trinity
  checkout tested alone): the verl tests are then skipped.

Every test module asserts, through the ``verl_tree`` / ``trinity_tree`` fixtures, that the modules it
uses were imported from the tree it claims to test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

EXPECTATIONS = ("fixed", "bug")


def _tree_from_env(variable: str) -> Path | None:
    value = os.environ.get(variable)
    return Path(value).resolve() if value else None


def _assert_imported_from(module_name: str, tree: Path) -> None:
    module = __import__(module_name, fromlist=["__file__"])
    module_file = Path(module.__file__).resolve()
    assert module_file.is_relative_to(tree), f"{module_name} was imported from {module_file}, not from {tree}"


@pytest.fixture(scope="session")
def expect() -> str:
    """What the trees under test should show: "fixed" (patched) or "bug" (vanilla)."""
    value = os.environ.get("PATCHSET_EXPECT", "")
    if value not in EXPECTATIONS:
        pytest.skip("regression tests need PATCHSET_EXPECT=fixed|bug (run them through scripts/test.sh)")
    return value


@pytest.fixture(scope="session")
def verl_on_path() -> Path:
    """The verl checkout on ``sys.path``, after checking that `verl` really comes from it."""
    tree = _tree_from_env("PATCHSET_VERL_TREE")
    if tree is None:
        pytest.skip("no verl tree on the path (PATCHSET_VERL_TREE)")
    for module_name in ("verl", "verl.trainer.ppo.core_algos", "verl.workers.utils.losses"):
        _assert_imported_from(module_name, tree)
    return tree


@pytest.fixture(scope="session")
def verl_tree(verl_on_path: Path) -> Path:
    """The verl checkout under test; skipped when verl is only there for Trinity (PATCHSET_VERL_ROLE=dependency)."""
    if os.environ.get("PATCHSET_VERL_ROLE") == "dependency":
        pytest.skip(f"verl at {verl_on_path} is only a dependency of the Trinity tree under test")
    return verl_on_path


@pytest.fixture(scope="session")
def trinity_tree(verl_on_path: Path) -> Path:
    """The Trinity-RFT checkout under test (Trinity's engine loss needs verl too)."""
    tree = _tree_from_env("PATCHSET_TRINITY_TREE")
    if tree is None:
        pytest.skip("no Trinity-RFT tree under test (PATCHSET_TRINITY_TREE)")
    for module_name in ("trinity", "trinity.trainer.verl.losses"):
        _assert_imported_from(module_name, tree)
    return tree


@pytest.fixture(scope="session")
def baseline_dir() -> Path | None:
    """Folder where the vanilla run records observations for the patched run to compare against."""
    return _tree_from_env("PATCHSET_BASELINE_DIR")
