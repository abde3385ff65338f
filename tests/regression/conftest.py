"""Wiring for the regression suite: which upstream trees it tests, and what it expects of them.

`patchset.testenv.regression` runs this suite in a child process with the trees under test first on
``sys.path`` and three environment variables:

- ``PATCHSET_VERL_TREE`` / ``PATCHSET_TRINITY_TREE``: the checkouts whose modules the tests import;
- ``PATCHSET_EXPECT``: ``fixed`` for patched trees (the invariants must hold) or ``bug`` for the
  vanilla pinned trees (the same measurements must show the defect: the teeth run);
- ``PATCHSET_VERL_ROLE=dependency`` when the verl tree is there only because Trinity imports it (a Trinity
  checkout tested alone, or beside verl 0.7.1 for its legacy path): the verl tests are then skipped.

Trinity-RFT trains through verl's engine beside verl >= 0.8 (``trinity_tree``) and through its own legacy worker
beside verl < 0.8 (``trinity_legacy_tree``); each fixture skips the tests of the other path.

Every test module asserts, through the ``verl_tree`` / ``trinity_tree`` fixtures, that the modules it
uses were imported from the tree it claims to test.

With ``PATCHSET_MODE=overlay`` the suite tests the overlays instead of patched checkouts: the two tree variables
name the site-packages of an environment where verl, Trinity-RFT and this project are pip-installed, ``fixed``
means the overlays switched on there (automatically, by ``patchset_overlay.pth``) and ``bug`` means switched off
(``PATCHSET_OVERLAYS=0``); each side asserts, through ``python -m patchset_overlay status``'s own record, that
the overlay is active or off as claimed. Tests that read patched files rather than running code (the generated
configs, the upstream lint of the patched files) do not apply there and are skipped, saying why.

On a verl tree where upstream has the critic fix (verl >= 0.9.0), `patchset apply` skips the critic patch and
still runs this suite there with ``fixed``: the fix's invariants must hold on upstream's code too. The few tests
that pin a property of this series' backport rather than of the fix ask for ``critic_backport`` and are skipped
there; ``verl_upstream_skips`` says which patches the series skips on the tree, by asking the planner itself.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# engine_harness (the engine and loss helpers) and patchset run from this checkout: appended, after the trees under
# test and the installed packages, before any test module imports them (and so in every fork server's path too)
if str(REPO_ROOT) not in sys.path:
    sys.path.append(str(REPO_ROOT))
# the tests' helpers as `harness` (tests/harness): an installed sdist may bring a top-level `tests` package of its own
if str(REPO_ROOT / "tests") not in sys.path:
    sys.path.append(str(REPO_ROOT / "tests"))

from patchset.plumbing import bounded, children  # noqa: E402
from patchset.testenv import suite_forks  # noqa: E402
from patchset.testenv.regression import BASELINE_DONE_FILE, WARM_SERVER_VARIABLE, suite_limit  # noqa: E402

EXPECTATIONS = ("fixed", "bug")
# Parameters that only vary the batch's shape: how it is cut into micro-batches and over how many ranks. With
# PATCHSET_SAMPLE=shapes (the teeth run of the test command) each test keeps one shape per loss and mode: every
# check still has to fail on the vanilla trees once, without every case again.
SHAPE_PARAMS = frozenset({"split", "dp_size", "world_size", "micro_batch_rows"})
SAMPLE_VARIABLE = "PATCHSET_SAMPLE"
# the engine runs, then the other modules whose processes run a training step (`patchset.plumbing.children`)
FIRST = ("test_engine_e2e.py", "test_gpu_proof_smoke.py", "test_trinity_legacy_data_parallel.py")
FIRST += ("test_trinity_legacy_sequence_parallel.py",)
# tests whose patched run compares every case with the vanilla run's own measurement of it: never sampled
EVERY_VANILLA_CASE = frozenset(
    {
        "test_every_policy_loss_gradient_independent_of_the_split",
        "test_ppo_every_aggregation_with_and_without_its_terms",
        # sampled, teeth recorded one split of two, and the patched run's other split compared with nothing
        "test_loss_scale_switch_off_is_upstreams_rule",
    }
)
MODES = ("patches", "overlay")
# tests that check files a patch changes; overlays change no file, so these say nothing about them
OVERLAY_NOT_APPLICABLE = {
    "test_generated_config_critic_section_matches_composition": "the flattened _generated_ppo_*.yaml files are "
    "upstream's installed files, which overlays never edit",
    "test_upstream_lint.py": "lints the patched upstream files; the overlay code is linted with this project",
    "test_distillation_upstream_test.py": "runs a test file a patch adds to upstream's tree; overlays install none",
    "test_trinity_upstream_tests.py": "runs the test files the Trinity patches add to upstream's tree; overlays "
    "install none",
}
CRITIC_LOSS_FILE = "verl/workers/utils/losses.py"  # the file of the critic's value_loss, which the fix changes
DPO_STEPS_PATCH = "-trainer-make-one-dpo-training-step-one-optimizer"  # the Trinity patch a user may leave out
# the trees' modules nearly every test imports, and the children of the fork server too (the data-parallel ranks'
# `harness.gloo_ranks.PRELOAD`, the first calls' `distillation_cases.MODULES`): imported before its fork
SHARED_WITH_CHILDREN = (
    "verl",
    "verl.trainer.ppo.core_algos",
    "verl.workers.utils.losses",
    "verl.trainer.distillation.losses",
)
UPSTREAM_HAS_FIX = "off (upstream has the fix)"  # an overlay piece's state where the release has its fix
OTHER_RELEASE = "off (another release's piece)"  # a piece written for other releases (another covers this one)


@dataclass(frozen=True)
class UpstreamSkip:
    """A patch of a series that `patchset apply` skips on the tree under test because upstream has its change."""

    patch: str
    files: tuple[str, ...]
    reason: str


def _tree_from_env(variable: str) -> Path | None:
    value = os.environ.get(variable)
    return Path(value).resolve() if value else None


def _assert_imported_from(module_name: str, tree: Path) -> None:
    module = __import__(module_name, fromlist=["__file__"])
    module_file = Path(module.__file__).resolve()
    assert module_file.is_relative_to(tree), f"{module_name} was imported from {module_file}, not from {tree}"


def _mode() -> str:
    value = os.environ.get("PATCHSET_MODE", "patches")
    assert value in MODES, f"PATCHSET_MODE must be one of {MODES}, not {value!r}"
    return value


def _shape_free_key(item: pytest.Item) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """The test and its parameters other than the batch's shape (``SHAPE_PARAMS``, also inside a case dataclass);
    None for a test whose parameters include no shape."""
    if getattr(item, "originalname", "") in EVERY_VANILLA_CASE or item.path.name == "test_engine_e2e.py":
        return None  # (the engine runs every world it measures whatever is collected: nothing to save there)
    params = getattr(getattr(item, "callspec", None), "params", {})
    kept: list[tuple[str, str]] = []
    shaped = False
    for name, value in sorted(params.items()):
        if name in SHAPE_PARAMS:
            shaped = True
            continue
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = [field.name for field in dataclasses.fields(value)]
            shaped |= any(name in SHAPE_PARAMS for name in fields)
            value = tuple((name, getattr(value, name)) for name in fields if name not in SHAPE_PARAMS)
        kept.append((name, repr(value)))
    return (item.nodeid.split("[", 1)[0], tuple(kept)) if shaped else None


def _sample_shapes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep one batch shape per test, loss and mode: the last listed (the most micro-batches, or the dynamic cut)."""
    keys = {id(item): _shape_free_key(item) for item in items}
    last = {key: item for item in items if (key := keys[id(item)]) is not None}
    kept = {id(item) for item in last.values()} | {id(item) for item in items if keys[id(item)] is None}
    dropped = [item for item in items if id(item) not in kept]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if id(item) in kept]


# the tests that compare the patched trees with what the vanilla run recorded in PATCHSET_BASELINE_DIR: they run last in
# their session, and where the test command runs the fix run beside teeth (--baseline-wait), each waits for the
# record to be complete (BASELINE_DONE_FILE) before it reads it
VANILLA_BASELINE_MARK = "vanilla_baseline"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--baseline-wait",
        type=float,
        metavar="SECONDS",
        help="a patched run beside the vanilla one: wait this long at most for its record (vanilla_baseline tests)",
    )


def pytest_configure(config: pytest.Config) -> None:
    bounded.register(config)  # names the test a hung run is in (`patchset.plumbing.bounded`)
    config.addinivalue_line(
        "markers", f"{VANILLA_BASELINE_MARK}: compares the tree under test with the vanilla run's record (baseline_dir)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SAMPLE_VARIABLE) == "shapes":
        _sample_shapes(config, items)
    # the longest module first: under pytest-xdist (one file per worker) the other worker runs everything else
    # meanwhile, instead of the engine runs starting last on a core left alone; then the other long ones
    items.sort(key=lambda item: FIRST.index(item.path.name) if item.path.name in FIRST else len(FIRST))
    # the comparisons with the vanilla run's record last: beside teeth, that record is written while this run goes
    items.sort(key=lambda item: item.get_closest_marker(VANILLA_BASELINE_MARK) is not None)
    if _mode() != "overlay":
        return
    for item in items:
        reason = OVERLAY_NOT_APPLICABLE.get(item.originalname) or OVERLAY_NOT_APPLICABLE.get(item.path.name)
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"overlay mode: {reason}"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test modules are imported (torch, transformers) and no test has computed anything: the moment to fork the
    fork server of the processes the tests start (ranks, first calls) from this process, rather than start an
    interpreter that imports all of it again (`patchset.plumbing.children.start_warm_server`; without effect under
    pytest-xdist, whose workers have threads). The trees' modules that nearly every test imports, and the children
    too, are imported first (`SHARED_WITH_CHILDREN`): once for this process and every child, not again in each."""
    if not session.items or session.config.option.collectonly:
        return
    started = children.start_warm_server(share=SHARED_WITH_CHILDREN)
    required = os.environ.get(WARM_SERVER_VARIABLE) == "required" and not hasattr(session.config, "workerinput")
    if required and not started:
        reason = children.warm_server_refusal()
        pytest.exit(f"no warm fork server for the ranks and first calls: {reason} ({WARM_SERVER_VARIABLE}=required)", 1)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(VANILLA_BASELINE_MARK) is not None:
        _wait_for_the_vanilla_record(item.config.getoption("baseline_wait", None))


def _wait_for_the_vanilla_record(wait: float | None) -> None:
    """A patched run beside the vanilla one (the test command's fix step, with ``--baseline-wait``): wait until the
    vanilla run has marked its record complete, at most ``wait`` seconds. Elsewhere the record is read as it is (or
    is absent, and the comparisons say so)."""
    folder = os.environ.get("PATCHSET_BASELINE_DIR")
    if not wait or not folder or os.environ.get("PATCHSET_EXPECT") != "fixed":
        return
    done = Path(folder) / BASELINE_DONE_FILE
    deadline = time.monotonic() + (0 if _RECORD_LATE else float(wait))  # waited once in vain: not again per test
    while not done.exists():
        if time.monotonic() > deadline:
            _RECORD_LATE.append(done)
            pytest.fail(f"the vanilla run's record in {folder} is not complete after {float(wait):g} s ({done.name})")
        time.sleep(0.5)


_RECORD_LATE: list[Path] = []


def _assert_overlay_state(overlay_name: str, expect: str, tree: Path) -> None:
    """In overlay mode: the overlay is the one installed beside the upstream (not this checkout's source), and
    every piece of it is active when the fix is expected (but those whose fix the installed release has, as verl
    0.9.1 has the critic's, and those written for other releases, as verl 0.8.0's critic piece on 0.7.1), and none
    when the bug is."""
    if _mode() != "overlay":
        return
    from patchset_overlay.status import collect

    _assert_imported_from(overlay_name, tree)
    entry = next(entry for entry in collect() if entry["overlay"] == overlay_name)
    states = {piece["piece"]: piece["state"] for piece in entry["pieces"]}
    if expect == "fixed":
        needed = [state for state in states.values() if state not in (UPSTREAM_HAS_FIX, OTHER_RELEASE)]
        assert needed and all(state == "active" for state in needed), f"{overlay_name} is not active: {entry}"
    else:
        assert not any(state == "active" for state in states.values()), f"{overlay_name} is active: {entry}"


@pytest.fixture(scope="session")
def expect() -> str:
    """What the trees under test should show: "fixed" (patched) or "bug" (vanilla)."""
    value = os.environ.get("PATCHSET_EXPECT", "")
    if value not in EXPECTATIONS:
        pytest.skip("regression tests need PATCHSET_EXPECT=fixed|bug (run them through scripts/test.sh)")
    return value


UpstreamPytest = Callable[[Path, Sequence[Path], Sequence[str]], tuple[int, str]]


@pytest.fixture(scope="session")
def upstream_pytest() -> UpstreamPytest:
    """Run upstream-style test files as upstream runs them (``python -m pytest`` in a tree, with given trees on
    PYTHONPATH, no xdist): forked by the test command's suite fork server where this run has one (a fresh interpreter
    importing torch costs 6 to 10 CPU-s), else a fresh interpreter. Returns the exit status and the output."""

    def run(cwd: Path, pythonpath: Sequence[Path], files: Sequence[str]) -> tuple[int, str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(path) for path in pythonpath)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *files]
        with tempfile.TemporaryFile("w+", encoding="utf-8") as output:
            launch = suite_forks.launcher(Path(sys.executable), env)
            code = bounded.run_bounded(command, f"upstream tests in {cwd}", suite_limit(), cwd, env, output, launch)
            output.seek(0)
            return code, output.read()

    return run


@pytest.fixture(scope="session")
def verl_on_path(expect: str) -> Path:
    """The verl checkout on ``sys.path``, after checking that `verl` really comes from it (and, in overlay mode,
    that the verl overlay is in the state ``expect`` calls for)."""
    tree = _tree_from_env("PATCHSET_VERL_TREE")
    if tree is None:
        pytest.skip("no verl tree on the path (PATCHSET_VERL_TREE)")
    for module_name in ("verl", "verl.trainer.ppo.core_algos", "verl.workers.utils.losses"):
        _assert_imported_from(module_name, tree)
    _assert_overlay_state("verl_overlay", expect, tree)
    return tree


@pytest.fixture(scope="session")
def verl_tree(verl_on_path: Path) -> Path:
    """The verl checkout under test; skipped when verl is only there for Trinity (PATCHSET_VERL_ROLE=dependency)."""
    if os.environ.get("PATCHSET_VERL_ROLE") == "dependency":
        pytest.skip(f"verl at {verl_on_path} is only a dependency of the Trinity tree under test")
    return verl_on_path


@pytest.fixture(scope="session")
def verl_distillation_tree(verl_tree: Path) -> Path:
    """The verl checkout under test, for the on-policy distillation tests: skipped on a release without it (verl
    0.7.x has no ``verl/trainer/distillation``, so patch verl 0002 has nothing to fix there)."""
    if not (verl_tree / "verl" / "trainer" / "distillation").is_dir():
        pytest.skip(f"verl at {verl_tree} has no on-policy distillation (verl/trainer/distillation)")
    return verl_tree


def _trinity_on_path(verl_on_path: Path, legacy: bool) -> Path:
    """The Trinity-RFT checkout under test, on the training path the tests ask for: Trinity's own
    ``is_verl_legacy()`` (verl < 0.8) picks its legacy worker, else verl's engine."""
    tree = _tree_from_env("PATCHSET_TRINITY_TREE")
    if tree is None:
        pytest.skip("no Trinity-RFT tree under test (PATCHSET_TRINITY_TREE)")
    if not (tree / "trinity").is_dir():  # overlay mode on a venv with verl alone (verl 0.9.1, 0.7.1)
        pytest.skip(f"no Trinity-RFT in {tree}")
    from trinity.trainer.trainer import is_verl_legacy

    if is_verl_legacy() != legacy:
        # the release line, not the version string: a patched wheel's local label must not show up in a skip
        # reason (the wheel check treats that as a version check the label tripped)
        if is_verl_legacy():
            taken, wanted, beside = "legacy worker", "engine", "verl < 0.8"
        else:
            taken, wanted, beside = "engine", "legacy worker", "verl >= 0.8"
        pytest.skip(
            f"Trinity trains through its {taken} beside {beside}; these tests are for its {wanted} path "
            f"(scripts/apply.sh runs them beside the verl pinned for it)"
        )
    return tree


@pytest.fixture(scope="session")
def trinity_tree(verl_on_path: Path, expect: str) -> Path:
    """The Trinity-RFT checkout under test on verl's engine (verl >= 0.8; Trinity's engine loss needs verl too)."""
    tree = _trinity_on_path(verl_on_path, legacy=False)
    for module_name in ("trinity", "trinity.trainer.verl.losses"):
        _assert_imported_from(module_name, tree)
    _assert_overlay_state("trinity_overlay", expect, tree)
    return tree


@pytest.fixture(scope="session")
def trinity_legacy_tree(verl_on_path: Path, expect: str) -> Path:
    """The Trinity-RFT checkout under test on its legacy path (beside verl < 0.8: ``trinity/trainer/verl_legacy``)."""
    tree = _trinity_on_path(verl_on_path, legacy=True)
    from trinity.utils.log import get_logger

    # Trinity's legacy actor module logs through the logger its Ray actor names first; name one as a worker would
    get_logger("patchset-regression", in_ray_actor=True)
    for module_name in ("trinity", "trinity.trainer.verl_legacy.dp_actor"):
        _assert_imported_from(module_name, tree)
    _assert_overlay_state("trinity_overlay", expect, tree)
    return tree


@pytest.fixture(scope="session")
def dpo_steps_patch(expect: str) -> bool:
    """Whether the Trinity tree under test counts a DPO mini-batch in pairs (one optimizer step per training step):
    a patched tree whose series lists that patch, or in overlay mode an overlay with a piece that mirrors it. It changes
    upstream's behaviour, and a user who wants the old one leaves it out of ``patches/trinity/series``; the tests
    then expect upstream's mini-batches."""
    if expect != "fixed":
        return False
    if _mode() == "overlay":  # the overlay installed: does it mirror that patch (a piece named after it)?
        from patchset_overlay.status import collect

        entry = next(entry for entry in collect() if entry["overlay"] == "trinity_overlay")
        return any(DPO_STEPS_PATCH in patch for piece in entry["pieces"] for patch in piece.get("patches", ()))
    from patchset.series.model import load_series

    return any(DPO_STEPS_PATCH in patch.name for patch in load_series(REPO_ROOT / "patches", "trinity").patches)


@pytest.fixture(scope="session")
def baseline_dir() -> Path | None:
    """Folder where the vanilla run records observations for the patched run to compare against."""
    return _tree_from_env("PATCHSET_BASELINE_DIR")


@pytest.fixture(scope="session")
def verl_version(verl_on_path: Path) -> str:
    """The version the verl tree under test declares (``verl/version/version``)."""
    return (verl_on_path / "verl" / "version" / "version").read_text(encoding="utf-8").strip()


@pytest.fixture(scope="session")
def verl_series(verl_version: str) -> str:
    """The series (folder under patches/) that targets the verl release under test: ``verl-0.7`` for verl 0.7.1, the
    ``verl`` series for 0.8 and later, as ``patches/upstreams.toml`` maps each pin (``verl`` for an unpinned one)."""
    from patchset.upstreams.pins import load_pins

    pin = load_pins(REPO_ROOT / "patches" / "upstreams.toml").find("verl", verl_version.split("+", 1)[0])
    return pin.series if pin is not None and pin.target else "verl"


@pytest.fixture(scope="session")
def verl_upstream_skips(verl_tree: Path, verl_version: str, verl_series: str) -> dict[str, UpstreamSkip]:
    """{patch name: skip} for the patches of the verl series that `patchset apply` skips on this tree because
    upstream has their change (``Applied-Upstream`` / ``Upstream-Check``), as the planner decides it (read-only), or
    because upstream fixed the bug its own way: on a patched tree (``fixed``), a patch that neither is applied nor
    applies is one apply skipped so, its tests having passed on the tree as shipped (``patchset.apply.behaviour``;
    not run again here). In overlay mode no series is applied: the overlay's own guards decide, and the fixtures above
    check them."""
    if _mode() == "overlay":
        return {}
    from patchset.apply.plan import Action, conflicts, plan_series
    from patchset.series.model import load_series

    series = load_series(REPO_ROOT / "patches", verl_series)
    steps = plan_series(verl_tree, series.patches, version=verl_version)
    skips: dict[str, UpstreamSkip] = {}
    if os.environ.get("PATCHSET_EXPECT") == "fixed":
        for step in conflicts(steps):
            reason = "fixed upstream (its tests passed on the tree as shipped)"
            skips[step.patch.name] = UpstreamSkip(step.patch.name, step.patch.files, reason)
    for step in steps:
        if step.action is not Action.SKIP:
            continue
        state = step.upstream
        since = state.since if state else None
        reason = "already upstream (content)" if state and not state.claimed else f"in upstream since {since or ''}"
        skips[step.patch.name] = UpstreamSkip(step.patch.name, step.patch.files, reason)
    return skips


@pytest.fixture
def critic_backport(verl_upstream_skips: dict[str, UpstreamSkip], verl_version: str) -> None:
    """For a test that pins a property of this series' critic backport, not of the fix: skip it on a tree where
    the series skipped the critic patch because upstream has the fix. The backport logs ``critic/vf_loss`` as a
    ``Metric`` of a float (``.item()``, as verl 0.8.0 logged it); upstream's ``value_loss`` (verl 0.9.x) logs the
    loss tensor itself."""
    for skip in verl_upstream_skips.values():
        if CRITIC_LOSS_FILE in skip.files:
            pytest.skip(
                f"pins how our critic backport logs critic/vf_loss, not the fix: on verl {verl_version} the series "
                f"skips {skip.patch} ({skip.reason}), and upstream's value_loss logs the loss tensor"
            )
