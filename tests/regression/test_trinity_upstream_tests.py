"""The Trinity series' own upstream-style tests (the ``*_test.py`` files its patches add to Trinity-RFT's tree) pass on
the tree the whole series made, run as upstream runs them, beside the verl the tree is tested with.

Each patch carries its test so that its pull request brings its proof; here they run together, where a later patch
can break an earlier one's test (0007 once broke the stand-in config of 0004's). On the vanilla tree the files are
missing. Beside verl 0.7.1 (the legacy path) only the files that do not need verl's engine run: the legacy
actors' (named so) and the algorithms'; beside verl >= 0.8 every file runs, and the legacy ones skip themselves.
"""

from __future__ import annotations

from pathlib import Path

from conftest import UpstreamPytest

from patchset.series.model import load_series

REPO_ROOT = Path(__file__).resolve().parents[2]


def _series_tests(legacy: bool) -> list[str]:
    """The test files of Trinity-RFT's layout that the series' patches touch; ``legacy``: those that run beside verl
    0.7.1, whose engine modules the trainer tests of the engine path import."""
    series = load_series(REPO_ROOT / "patches", "trinity")
    tests = {path for patch in series.patches for path in patch.files if path.endswith("_test.py")}
    if legacy:
        tests = {path for path in tests if "legacy" in Path(path).name or not path.startswith("tests/trainer/")}
    return sorted(tests)


def _check(tree: Path, verl: Path, expect: str, legacy: bool, upstream_pytest: UpstreamPytest) -> None:
    tests = _series_tests(legacy)
    assert tests, "the Trinity series touches no *_test.py file"
    present = [test for test in tests if (tree / test).is_file()]
    if expect == "bug":
        assert present == [], f"vanilla {tree} already has {present}"
        return
    assert present == tests, f"{tree} lacks {sorted(set(tests) - set(present))}, which the series adds"
    code, output = upstream_pytest(tree, (tree, verl), tests)
    assert code == 0 and " passed" in output, output[-5000:]


def test_the_series_own_tests_pass_on_the_engine_path(
    trinity_tree: Path, verl_on_path: Path, expect: str, upstream_pytest: UpstreamPytest
) -> None:
    _check(trinity_tree, verl_on_path, expect, False, upstream_pytest)


def test_the_series_own_tests_pass_on_the_legacy_path(
    trinity_legacy_tree: Path, verl_on_path: Path, expect: str, upstream_pytest: UpstreamPytest
) -> None:
    _check(trinity_legacy_tree, verl_on_path, expect, True, upstream_pytest)
