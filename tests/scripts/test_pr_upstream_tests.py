"""export-pr's upstream-tests gate on a fixture checkout of this test's own: a Trinity-RFT-like tree whose tests/
folder holds unittest ``*_test.py`` files, and a two-group series.

Invariants: upstream's test files that import a changed module, here through a package's lazy registry
(``from trinity.algorithm import LOSS_FN``), are selected, run (importing the checkout's ``tests.tools``, not this
repository's ``tests`` package) and named with the import that selected them; a test file that imports only other
names of the same package is not selected (it fails if run, so a wrong choice fails the gate); a selected file that
starts a Ray cluster or imports a module the test venv lacks is not run, and the output names it with the reason;
a selected upstream test that fails fails the gate (exit 1, naming the branch), unless it fails on the release too, run
the same way (the same files in the same order: an order-dependent failure of upstream's own); a group's
``pr/<group>.upstream-tests.patch`` is committed on the group's branch, as a commit of its own after the group's
commits, when the checkout has its files (the upstream test it revises then passes), and when the checkout lacks
them the branch is made without it and the summary and a warning say so. The user's work tree is left as it was.
A package ``__init__`` that star-imports a changed module passes on the names that import binds (its ``__all__``,
else its public names; every name when ``__all__`` cannot be read). The export tests need the test venv and the
cached vanilla verl (Trinity's tests import verl), and are skipped without that cache.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from patchset_fakes import FORMAT_PATCH, REPO_ROOT, git, make_repo, write_files

from patchset import cli
from patchset.export import test_selection
from patchset.upstreams.fetch import resolve_cache
from patchset.upstreams.pins import load_pins


def main(argv: list[str]) -> int:
    """``python -m patchset export-pr ARGV``."""
    return cli.main(["export-pr", *argv])


CACHE = resolve_cache(None, os.environ, REPO_ROOT)  # read at import: conftest clears PATCHSET_CACHE per test


def _module(doc: str, body: str = "") -> str:
    return f'# -*- coding: utf-8 -*-\n"""{doc}"""\n' + (f"\n{body}" if body else "")


def _unittest(doc: str, imports: str, test: str) -> str:
    """A unittest module in Trinity's style, with the docstrings its flake8 hook asks for."""
    return _module(
        doc,
        f"import unittest\n\n{imports}\n\n\nclass FixtureTest(unittest.TestCase):\n"
        f'    """{doc}"""\n\n    def test_it(self):\n        """Check it."""\n{test}',
    )


TREE = {
    "trinity/__init__.py": '# -*- coding: utf-8 -*-\n__version__ = "0.6.0"\n',
    "trinity/trainer/__init__.py": "",
    "trinity/trainer/verl/__init__.py": "",
    "trinity/trainer/verl/losses.py": _module("Losses."),
    "trinity/utils/__init__.py": "",
    "trinity/utils/registry.py": _module(
        "A registry that imports its entries when asked.",
        "import importlib\n\n\nclass Registry(dict):\n"
        '    """Names to dotted paths."""\n\n    def get(self, name):\n'
        '        """Import the entry named ``name``."""\n'
        '        module, _, attr = self[name].rpartition(".")\n'
        "        return getattr(importlib.import_module(module), attr)\n",
    ),
    "trinity/algorithm/__init__.py": (
        "from trinity.algorithm.kl import kl\nfrom trinity.algorithm.loss_fn import LOSS_FN\n"
        "from trinity.algorithm.other import OTHER\n"
    ),
    "trinity/algorithm/other.py": _module("Another name of the package.", "OTHER = 1\n"),
    "trinity/algorithm/kl.py": _module("KL.", '\ndef kl(x):\n    """Return the KL term."""\n    return x\n'),
    "trinity/algorithm/loss_fn/__init__.py": (
        "from trinity.utils.registry import Registry\n\n"
        'LOSS_FN = Registry({"pair": "trinity.algorithm.loss_fn.pair_loss.pair_loss"})\n'
    ),
    "trinity/algorithm/loss_fn/pair_loss.py": _module(
        "Pair loss.", '\ndef pair_loss(x):\n    """Return the loss."""\n    return x * 2\n'
    ),
    "README.md": "fixture trinity\n",
}
# upstream's tests, in its repository only (a release sdist ships none)
UPSTREAM_TESTS = {
    # a helper of the tests folder (which has no __init__.py, as Trinity's), imported as tests.tools
    "tests/tools.py": _module("Test helpers.", "PAIR_INPUT = 3\n"),
    "tests/algorithm/loss_fn_test.py": _unittest(
        "Loss functions.",
        "import os\n\nfrom tests.tools import PAIR_INPUT\nfrom trinity.algorithm import LOSS_FN",
        '        os.environ["PATCHSET_FIXTURE_RAN"] = "1"\n'
        '        self.assertEqual(LOSS_FN.get("pair")(PAIR_INPUT), 6)\n',
    ),
    # fails on the release itself when run after loss_fn_test.py (which sets the flag): not the branch's failure
    "tests/algorithm/loss_fn_zorder_test.py": _unittest(
        "Runs after loss_fn_test.py and fails there, on the release too.",
        "import os\n\nfrom trinity.algorithm import LOSS_FN",
        '        self.assertNotIn("PATCHSET_FIXTURE_RAN", os.environ, LOSS_FN)\n',
    ),
    "tests/algorithm/other_test.py": _unittest(
        "Another name: it tests no changed module, and fails if it is chosen.",
        "from trinity.algorithm import OTHER",
        '        self.fail(f"other_test.py tests no changed module {OTHER}")\n',
    ),
    "tests/algorithm/kl_test.py": _unittest(
        "KL.", "from trinity.algorithm.kl import kl", "        self.assertEqual(kl(2), 2)\n"
    ),
    "tests/trainer/cluster_test.py": _unittest(
        "On a Ray cluster.",
        "from trinity.algorithm import LOSS_FN",
        '        import ray\n\n        ray.init(address="ray://nowhere.invalid:1")\n        LOSS_FN.get("pair")\n',
    ),
    "tests/trainer/engine_test.py": _unittest(
        "With an engine the venv lacks.",
        "import patchset_no_such_engine\n\nfrom trinity.algorithm.loss_fn import LOSS_FN",
        '        patchset_no_such_engine.run(LOSS_FN.get("pair"))\n',
    ),
}
PAIR, KL = "0001-trainer-pair-loss-triples.patch", "0002-trainer-kl-adds-one.patch"


def _commit(tree: Path, message: str) -> str:
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", message)
    return git(tree, *FORMAT_PATCH, "-1", "--stdout")


def _patches_dir(base: Path) -> Path:
    """The real upstreams.toml and a Trinity series of two groups: pair-loss (0001, with its upstream-tests patch)
    and kl (0002)."""
    work = make_repo(base / "work", TREE | UPSTREAM_TESTS)
    series = base / "patches" / "trinity"
    (series / "pr").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "patches" / "upstreams.toml", base / "patches")
    fields = "\n\nAuthor: Test\nForwarded: no, a fixture\nLast-Update: 2026-12-05"
    pair = work / "trinity/algorithm/loss_fn/pair_loss.py"
    pair.write_text(pair.read_text().replace("x * 2", "x * 3"))
    (series / PAIR).write_text(_commit(work, "[Trainer] Triple the pair loss\n\nThe pair loss triples." + fields))
    test = work / "tests/algorithm/loss_fn_test.py"
    test.write_text(test.read_text().replace("(PAIR_INPUT), 6)", "(PAIR_INPUT), 9)"))
    revised = _commit(
        work, "[Tests] Pin the tripled pair loss\n\nThe fix changes the value.\n\nUpstream-Commit: 0123abc"
    )
    (series / "pr" / "pair-loss.upstream-tests.patch").write_text(revised)
    kl = work / "trinity/algorithm/kl.py"
    kl.write_text(kl.read_text().replace("return x\n", "return x + 1\n"))
    (series / KL).write_text(_commit(work, "[Trainer] Add one to KL\n\nKL adds one." + fields))
    (series / "series").write_text(f"{PAIR}\n{KL}\n")
    (series / "groups").write_text("pair-loss 0001\nkl 0002\n")
    for group, title in (("pair-loss", "[Trainer] Triple the pair loss"), ("kl", "[Trainer] Add one to KL")):
        (series / "pr" / f"{group}.md").write_text(f"{title}\n\nWhy.\n")
    return base / "patches"


@pytest.fixture
def fixture_series(tmp_path: Path) -> Path:
    pin = load_pins(REPO_ROOT / "patches/upstreams.toml").default_for("verl")
    if pin is None or not (CACHE.upstreams / pin.dirname / ".git").exists():
        pytest.skip(f"no cached vanilla verl at {CACHE.upstreams} (scripts/test.sh fetches it)")
    return _patches_dir(tmp_path)


def _export(checkout: Path, patches: Path, *extra: str) -> int:
    return main(["trinity", str(checkout), "--patches-dir", str(patches), "--cache", str(CACHE.root), *extra])


def test_upstream_tests_reached_through_a_registry_run_and_a_failing_one_fails_the_gate(
    fixture_series, tmp_path, capsys
):
    checkout = make_repo(tmp_path / "checkout", TREE | UPSTREAM_TESTS)
    status = git(checkout, "status", "--porcelain", "--untracked-files=all")

    assert _export(checkout, fixture_series) == 1

    captured = capsys.readouterr()
    out = captured.out
    pair, kl = out.split("=== patchset/trinity-kl (group kl) ===")
    assert (
        "upstream test run: tests/algorithm/loss_fn_test.py (imports trinity.algorithm.LOSS_FN, which reaches " in pair
    )
    # 9, as the upstream-tests patch pins it; the test that fails after it on the release too does not fail the gate
    assert "upstream CPU tests: passed (1 failed, 1 passed" in pair
    assert (
        "every failure also fails on vanilla v0.6.0, run the same way: "
        "tests/algorithm/loss_fn_zorder_test.py::FixtureTest::test_it"
    ) in pair
    assert "other_test.py" not in out
    assert "upstream test NOT run: tests/trainer/cluster_test.py (imports trinity.algorithm.LOSS_FN" in pair
    assert "): starts a Ray cluster" in pair
    assert (
        "upstream test NOT run: tests/trainer/engine_test.py (imports trinity.algorithm.loss_fn.LOSS_FN, which "
        "reaches trinity/algorithm/loss_fn/pair_loss.py): imports patchset_no_such_engine, which the test venv does "
        "not have"
    ) in pair
    assert "pair-loss.upstream-tests.patch changes upstream's tests/algorithm/loss_fn_test.py" in pair
    assert "upstream test run: tests/algorithm/kl_test.py (named for trinity/algorithm/kl.py)" in kl
    assert "upstream CPU tests: FAILED (1 failed" in kl  # kl_test.py: the branch's own failure stands
    assert "error: upstream CPU tests (1 failed" in captured.err and "on branch patchset/trinity-kl" in captured.err
    subjects = git(checkout, "log", "--format=%s", "main..patchset/trinity-pair-loss").splitlines()
    assert subjects == ["[Tests] Pin the tripled pair loss", "[Trainer] Triple the pair loss"]
    assert "Upstream-Commit" not in git(checkout, "log", "-1", "--format=%B", "patchset/trinity-pair-loss")
    assert git(checkout, "status", "--porcelain", "--untracked-files=all") == status


def test_upstream_tests_patch_is_reported_not_applied_on_a_checkout_without_the_tests(fixture_series, tmp_path, capsys):
    checkout = make_repo(tmp_path / "checkout", TREE)  # as a release sdist: no tests/

    assert _export(checkout, fixture_series, "--group", "pair-loss") == 0

    captured = capsys.readouterr()
    lacks = "NOT applied (the checkout lacks tests/algorithm/loss_fn_test.py)"
    assert "branch patchset/trinity-pair-loss on HEAD (1 patch(es) as one commit each); gates passed; " in captured.out
    assert f"pair-loss.upstream-tests.patch {lacks}" in captured.out
    assert "was NOT applied: the checkout lacks tests/algorithm/loss_fn_test.py" in captured.err
    assert "this branch does not carry the change to upstream's tests that this PR needs" in captured.err
    assert git(checkout, "log", "--format=%s", "main..patchset/trinity-pair-loss").splitlines() == [
        "[Trainer] Triple the pair loss"
    ]


STAR_TREE = {
    "verl/__init__.py": "",
    "verl/config/__init__.py": "from .critic import *\nfrom .actor import ActorConfig\n",
    "verl/config/actor.py": "class ActorConfig:\n    pass\n",
}


@pytest.mark.parametrize(
    ("critic", "imported", "reaches"),
    [
        # a star import binds the module's __all__, or its public top-level names
        ("__all__ = ['CriticConfig']\nclass CriticConfig: ...\nclass Hidden: ...\n", "CriticConfig", True),
        ("__all__ = ['CriticConfig']\nclass CriticConfig: ...\nclass Hidden: ...\n", "Hidden", False),
        ("class CriticConfig: ...\nclass _Private: ...\n", "CriticConfig", True),
        ("class CriticConfig: ...\n", "ActorConfig", False),
        # an __all__ it cannot read: every name of the package may come from the changed module
        ("__all__ = [name for name in dir()]\n", "ActorConfig", True),
    ],
)
def test_a_star_import_reaches_the_names_it_binds(tmp_path, critic, imported, reaches):
    write_files(tmp_path, STAR_TREE | {"verl/config/critic.py": critic})
    reach = test_selection.reach_of(tmp_path, "verl", ["verl/config/critic.py"])
    (tmp_path / "test_x.py").write_text(f"from verl.config import {imported}\n")

    found = test_selection.imports_reaching(tmp_path / "test_x.py", reach)

    assert found == ((f"verl.config.{imported}", "verl/config/critic.py") if reaches else None)
