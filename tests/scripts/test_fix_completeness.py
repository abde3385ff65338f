"""A fix is one checked unit: each patch of every series under patches/ has all of its parts, or a stated reason for
each part it lacks; and each overlay piece says what the patches it mirrors say.

A fix's parts (a new loss fix touches about 18 files; nothing else checks the set is complete):

- ``group``: a line of ``patches/<series>/groups`` lists it; ``pr``: that group's PR body, ``pr/<group>.md``;
- ``teeth``: its entry in ``teeth``, whose ``-k`` expression names only tests that exist in tests/regression;
- ``overlay``: a piece of its upstream's overlay (``verl_overlay/pieces.py``, ``trinity_overlay/pieces.py``) names
  the patch (by its slug, as ``teeth`` does: a patch made again for another release line keeps it), where a release
  the series is pinned to is one the overlays support (its code is derived from the patch itself);
- ``harness``: the key its loss is trained under by the engine harness (``harness`` in parts.toml): one of
  ``LOSSES`` in ``engine_harness/losses.py`` that ``loss_function`` has a branch for, and the name of its GPU proof
  case where it has one (the proof trains ``loss_function(case.name)``);
- ``parity``: the functions of ``tests/overlay/parity_cases.py`` that compute its overlay/patch parity cases
  (``parity`` in parts.toml), each called by that file's ``main``;
- ``guard``: the objects ``tests/overlay/guard_cases.py`` checks are upstream's own when its piece stays off
  (``guard`` in parts.toml): keys of ``untouched()``, each an object its piece replaces;
- ``gpuproof``: a case of ``patchset/proof/cases.py`` that names it (``patch="verl 0001"``: series, number);
- ``fixes``: docs/fixes.md links the patch;
- ``readme``: a row of README.md's patch table links the patch, and its upstream cell says what the patch's header
  says: ``fixed in <upstream> <version>`` for a patch with ``Applied-Upstream``, ``not fixed`` for one without;
- ``audit``: every loss it touches (``audit`` in parts.toml) has a row of docs/loss-audit.md that names the patch's
  number beside that loss.

The other way round, README.md's patch table links only patches of the series, and a row of docs/loss-audit.md that
names a patch (``verl 0003``, ``Trinity 0002, 0003``) is of a loss that patch's ``audit`` names.

``patches/<series>/parts.toml`` is the one place that says, for each patch (a table named by its slug), the losses its
audit rows name (``audit``), its harness key, parity case functions and guarded objects (``harness``, ``parity``,
``guard``) and why a part is missing (``[<slug>.missing]``: part = reason). A part that is missing
without a reason fails, and so does a reason for a part that is there. Everything is read from files: nothing runs
but ``git apply --numstat`` on each patch (`patchset.series.model.read_patch`, the one reader of a patch).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import pytest

from patchset.series.groups import DESCRIPTIONS_DIR, GROUPS_FILE, parse_groups
from patchset.series.model import Patch, Series, load_series
from patchset.series.parts import PARTS_FILE, read_parts, slug_of
from patchset.series.tables import AUDIT_KEY
from patchset.upstreams.pins import Pins, load_pins
from patchset_overlay.derive import release_series
from patchset_overlay.spec import Overlay, Piece
from patchset_overlay.startup import overlays

REPO_ROOT = Path(__file__).resolve().parents[2]
PARTS = (
    "group",
    "pr",
    "teeth",
    "overlay",
    "harness",
    "parity",
    "guard",
    "gpuproof",
    "fixes",
    "readme",
    "audit",
)
HARNESS_LOSSES = "engine_harness/losses.py"
PARITY_CASES = "tests/overlay/parity_cases.py"
GUARD_CASES = "tests/overlay/guard_cases.py"
_NOT_NAMES = {"and", "or", "not"}


@dataclass(frozen=True)
class Tree:
    """Where the parts of the fixes are: the repo's files, and each overlay's spec with its package folder."""

    root: Path
    overlays: tuple[tuple[Overlay, Path], ...]

    @property
    def patches(self) -> Path:
        return self.root / "patches"

    def text(self, relative: str) -> str:
        path = self.root / relative
        return path.read_text(encoding="utf-8") if path.is_file() else ""


@dataclass(frozen=True)
class Fix:
    """One patch of one series, with what its series' ``parts.toml`` says of it."""

    series: Series
    patch: Patch
    number: int
    releases: tuple[str, ...]  # the releases the series is pinned to
    upstream: str  # the pins' key of its upstream (an overlay's import name)
    audit: tuple[str, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)
    harness: str = ""  # the engine harness's key for its loss
    parity: tuple[str, ...] = ()  # the functions of parity_cases.py that compute its parity cases
    guard: tuple[str, ...] = ()  # the objects guard_cases.py checks are left upstream's own

    @property
    def slug(self) -> str:
        return slug_of(self.patch.name)

    def __str__(self) -> str:
        return f"{self.series.name}/{self.patch.name}"


def series_names(pins: Pins) -> list[str]:
    """The series the pins name, once each, in the pins' order."""
    return list(dict.fromkeys(pin.series for pin in pins.pins))


def fixes_of(tree: Tree) -> list[Fix]:
    """Every patch of every series the pins name, in series order."""
    pins = load_pins(tree.patches / "upstreams.toml")
    found = []
    for name in series_names(pins):
        series = load_series(tree.patches, name)
        pinned = [pin for pin in pins.pins if pin.series == name]
        declared = read_parts(tree.patches / name)
        for number, patch in enumerate(series.patches, start=1):
            entry = declared.get(slug_of(patch.name), {})
            found.append(
                Fix(
                    series,
                    patch,
                    number,
                    tuple(pin.version for pin in pinned),
                    pinned[0].key,
                    tuple(entry.get("audit", ())),
                    dict(entry.get("missing", {})),
                    str(entry.get("harness", "")),
                    tuple(entry.get("parity", ())),
                    tuple(entry.get("guard", ())),
                )
            )
    return found


def overlay_releases(tree: Tree, overlay: Overlay, releases: tuple[str, ...]) -> list[str]:
    """The releases among ``releases`` that the overlay supports (``overlay = true`` in upstreams.toml)."""
    supported = release_series(overlay.distribution, tree.patches)
    return [release for release in releases if release in supported]


def pieces_of(tree: Tree, fix: Fix) -> list[tuple[Overlay, Path, Piece]]:
    """The pieces that carry ``fix``: of its upstream's overlay, where it supports a release of its series."""
    return [
        (overlay, folder, piece)
        for overlay, folder in tree.overlays
        if overlay.upstream == fix.upstream and overlay_releases(tree, overlay, fix.releases)
        for piece in overlay.pieces
        if fix.slug in piece.patches
    ]


@cache
def regression_names(regression: Path) -> frozenset[str]:
    """What a ``-k`` word can match in tests/regression: its test files' names, test functions and classes."""
    names: set[str] = set()
    for path in regression.glob("test_*.py"):
        names.add(path.stem)
        names.update(
            re.findall(r"^\s*(?:async )?def (test\w*)|^class (Test\w*)", path.read_text(encoding="utf-8"), re.M)
        )
    return frozenset(name for item in names for name in ((item,) if isinstance(item, str) else item) if name)


def readme_problem(readme: str, fix: Fix) -> str | None:
    """What README.md's patch table lacks for ``fix``: a row that links it, or the upstream status its header gives
    (the row's last cell)."""
    link = f"](patches/{fix.series.name}/{fix.patch.name})"
    row = next((line for line in readme.splitlines() if line.startswith("|") and link in line), None)
    if row is None:
        return "no row of README.md's patch table links it"
    status = row.rstrip().rstrip("|").rsplit("|", 1)[-1].strip()
    since = fix.patch.upstream_since
    expected = f"fixed in {fix.upstream} {since}" if since else "not fixed"
    if not status.startswith(expected):
        return f"README.md's row says {status[:60]!r} where its header says {expected!r}"
    return None


def _strings(node: ast.AST) -> set[str]:
    """Every string constant within ``node``."""
    return {item.value for item in ast.walk(node) if isinstance(item, ast.Constant) and isinstance(item.value, str)}


def _function(text: str, name: str) -> ast.FunctionDef | None:
    """The module-level function ``name`` of a module's text (None without it)."""
    body = ast.parse(text).body if text else ()
    return next((node for node in body if isinstance(node, ast.FunctionDef) and node.name == name), None)


def gpuproof_patches(cases_text: str) -> dict[str, str]:
    """{``patch=``: the case's name} of every ``Case(...)`` in the GPU proof's cases module, e.g.
    ``{"verl 0001": "critic"}``: the name is the harness key the proof trains it under."""
    found = {}
    for node in ast.walk(ast.parse(cases_text)) if cases_text else ():
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Case":
            named = {keyword.arg: keyword.value for keyword in node.keywords}
            name, patch = node.args[0] if node.args else named.get("name"), named.get("patch")
            if isinstance(patch, ast.Constant) and patch.value:
                found[str(patch.value)] = name.value if isinstance(name, ast.Constant) else ""
    return found


@cache
def harness_keys(losses_text: str) -> set[str]:
    """The keys the engine harness trains a loss under: the strings of ``LOSSES`` in ``engine_harness/losses.py``
    that ``loss_function`` compares its ``loss`` with (a key without its branch would build nothing)."""
    body = ast.parse(losses_text).body if losses_text else ()
    listed = {
        value
        for node in body
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "LOSSES" for target in node.targets)
        for value in _strings(node.value)
    }
    builder = _function(losses_text, "loss_function")
    compared = {value for node in ast.walk(builder) if isinstance(node, ast.Compare) for value in _strings(node)}
    return listed & compared if builder else set()


@cache
def parity_functions(parity_text: str) -> set[str]:
    """The functions whose cases the parity run computes: those ``main`` of ``parity_cases.py`` calls."""
    main = _function(parity_text, "main")
    calls = ast.walk(main) if main else ()
    return {node.func.id for node in calls if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


@cache
def guarded_objects(guard_text: str) -> set[str]:
    """The objects ``guard_cases.py`` checks are still upstream's own: the keys ``untouched()`` reports (the keys of
    its dict literals and of its subscript assignments)."""
    function = _function(guard_text, "untouched")
    found: set[str] = set()
    for node in ast.walk(function) if function else ():
        keys = node.keys if isinstance(node, ast.Dict) else []
        if isinstance(node, ast.Assign):
            keys = [target.slice for target in node.targets if isinstance(target, ast.Subscript)]
        found.update(key.value for key in keys if isinstance(key, ast.Constant) and isinstance(key.value, str))
    return found


def audit_rows(audit_text: str) -> Iterator[tuple[str, str]]:
    """(the loss cell, the other cells) of every table row of the loss audit."""
    for line in audit_text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) > 1 and not set(cells[0]) <= set("-: "):
            yield cells[0], " | ".join(cells[1:])


def named_patches(text: str, series: list[str]) -> Iterator[tuple[str, str]]:
    """(series, number) of each patch ``text`` names as ``<series> NNNN`` (``Trinity 0002, 0003, 0004``: three)."""
    names = "|".join(re.escape(name) for name in sorted(series, key=len, reverse=True))
    for name, numbers in re.findall(rf"\b({names})((?:(?:,| and| or)? \d{{4}}\b)+)", text, re.I):
        for number in re.findall(r"\d{4}", numbers):
            yield name.lower(), number


def undeclared(tree: Tree, fixes: list[Fix]) -> list[str]:
    """The other way round from the ``readme`` and ``audit`` parts: a row of README.md's patch table that links no
    patch of its series, and a row of docs/loss-audit.md that names a patch whose ``audit`` names no loss of it."""
    by_number = {(fix.series.name, f"{fix.number:04d}"): fix for fix in fixes}
    patch_files = {f"patches/{fix.series.name}/{fix.patch.name}" for fix in fixes}
    found = [
        f"README.md links {link}, no patch of its series"
        for line in tree.text("README.md").splitlines()
        if line.startswith("|")
        for link in re.findall(r"\]\((patches/[^)]+\.patch)\)", line)
        if link not in patch_files
    ]
    for cell, rest in audit_rows(tree.text("docs/loss-audit.md")):
        for series, number in named_patches(rest, sorted({fix.series.name for fix in fixes})):
            fix = by_number.get((series, number))
            if fix is None or not any(loss in cell for loss in fix.audit):
                found.append(f"docs/loss-audit.md names {series} {number} beside {cell[:60]!r}, not in its audit")
    return found


def missing_parts(tree: Tree, fix: Fix) -> dict[str, str]:
    """{part: what is missing} for ``fix`` in ``tree``; empty when it has every part."""
    missing: dict[str, str] = {}
    folder = tree.patches / fix.series.name
    groups_file = folder / GROUPS_FILE
    groups = parse_groups(groups_file.read_text(encoding="utf-8")).groups if groups_file.is_file() else ()
    group = next((group for group in groups if fix.number in group.numbers), None)
    if group is None:
        missing["group"] = f"no line of {GROUPS_FILE} lists {fix.number:04d}"
    if group is None or not (folder / DESCRIPTIONS_DIR / f"{group.name}.md").is_file():
        missing["pr"] = f"no {DESCRIPTIONS_DIR}/<group>.md for its group"
    selection = fix.series.teeth.get(fix.patch.name)
    known = regression_names(tree.root / "tests" / "regression")
    words = [word for word in re.findall(r"\w+", selection or "") if word not in _NOT_NAMES]
    unknown = [word for word in words if not any(word.lower() in name.lower() for name in known)]
    if not words or unknown:
        missing["teeth"] = f"teeth names no test of tests/regression ({selection!r}; unknown: {unknown})"
    pieces = pieces_of(tree, fix)
    if not pieces:
        missing["overlay"] = f"no piece of a {fix.upstream} overlay, for {', '.join(fix.releases)}, names {fix.slug}"
    number = f"{fix.number:04d}"
    cases = gpuproof_patches(tree.text("patchset/proof/cases.py"))
    case = next((name for patch, name in cases.items() if patch.lower().split() == [fix.series.name, number]), None)
    if fix.harness not in harness_keys(tree.text(HARNESS_LOSSES)):
        missing["harness"] = f"{fix.harness or 'no key'} is no loss of {HARNESS_LOSSES} (LOSSES, loss_function)"
    elif case is not None and case != fix.harness:
        missing["harness"] = f"its GPU proof case trains {case!r}, not the harness key {fix.harness!r} of parts.toml"
    uncalled = sorted(set(fix.parity) - parity_functions(tree.text(PARITY_CASES)))
    if not fix.parity or uncalled:
        missing["parity"] = f"main of {PARITY_CASES} calls no {', '.join(uncalled) or 'function named in parts.toml'}"
    unguarded = sorted(name for name in fix.guard if not pieces or name not in guarded_objects(tree.text(GUARD_CASES)))
    if not fix.guard or unguarded:
        missing["guard"] = (
            f"untouched() of {GUARD_CASES} checks no object of its piece named "
            f"{', '.join(unguarded) or 'in parts.toml'}"
        )
    if case is None:
        missing["gpuproof"] = f"no case of patchset/proof/cases.py has patch={fix.series.name} {number}"
    if f"patches/{fix.series.name}/{fix.patch.name}" not in tree.text("docs/fixes.md"):
        missing["fixes"] = "docs/fixes.md does not link it"
    readme = readme_problem(tree.text("README.md"), fix)
    if readme:
        missing["readme"] = readme
    rows = list(audit_rows(tree.text("docs/loss-audit.md")))
    unnamed = [
        loss for loss in fix.audit if not any(loss in cell and re.search(rf"\b{number}\b", rest) for cell, rest in rows)
    ]
    if not fix.audit or unnamed:
        missing["audit"] = f"no row of docs/loss-audit.md names {number} beside {unnamed or 'the losses in parts.toml'}"
    return missing


def problems(tree: Tree, fix: Fix) -> list[str]:
    """What is wrong with ``fix``: a part missing without a reason, a reason for a part that is there."""
    missing = missing_parts(tree, fix)
    where = f"patches/{fix.series.name}/{PARTS_FILE} [{fix.slug}.missing]"
    found = [
        f"{fix}: {part}: {text}, and {where} gives no reason"
        for part, text in missing.items()
        if part not in fix.reasons
    ]
    found += [f"{fix}: {where} {part}: there is no such part" for part in fix.reasons if part not in PARTS]
    found += [
        f"{fix}: {where} {part}: the part is there; drop the reason"
        for part in fix.reasons
        if part in PARTS and part not in missing
    ]
    return found


def real_tree() -> Tree:
    found = []
    for overlay in overlays():
        package = __import__(overlay.name)
        found.append((overlay, Path(package.__file__).resolve().parent))
    return Tree(REPO_ROOT, tuple(found))


TREE = real_tree()
FIXES = fixes_of(TREE)


@pytest.mark.parametrize("fix", FIXES, ids=str)
def test_each_fix_has_every_part_or_a_reason_for_it(fix: Fix):
    assert problems(TREE, fix) == []


def test_each_readme_row_and_audit_row_is_of_a_declared_fix():
    """README.md's patch table and docs/loss-audit.md's rows speak only of fixes as parts.toml declares them."""
    assert undeclared(TREE, FIXES) == []


def test_every_series_folder_is_checked():
    """A series folder no pin names would have its fixes go unchecked here."""
    folders = {path.parent.name for path in TREE.patches.glob("*/series")}
    assert folders <= set(series_names(load_pins(TREE.patches / "upstreams.toml")))


def test_each_parts_file_speaks_of_patches_of_its_series():
    """An entry of parts.toml whose patch was renamed or dropped would keep reasons for nothing."""
    for name in series_names(load_pins(TREE.patches / "upstreams.toml")):
        slugs = {fix.slug for fix in FIXES if fix.series.name == name}
        assert set(read_parts(TREE.patches / name)) - {AUDIT_KEY} <= slugs, name


def test_the_harness_data_speaks_only_of_its_losses():
    """``engine_harness/data.py`` names harness keys (the losses whose step computes the entropy): a key renamed or
    dropped in ``losses.py`` and kept there would turn the entropy off for a loss without a word."""
    data = ast.parse(TREE.text("engine_harness/data.py")).body
    (entropy,) = [
        node.value
        for node in data
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ENTROPY_LOSSES"
    ]
    assert _strings(entropy) and _strings(entropy) <= harness_keys(TREE.text(HARNESS_LOSSES))


def regression_tests(regression: Path) -> list[tuple[str, str]]:
    """(file stem, test function) of every test function of tests/regression: what a ``-k`` word matches."""
    return [
        (path.stem, name)
        for path in sorted(regression.glob("test_*.py"))
        for name in re.findall(r"^\s*(?:async )?def (test\w*)", path.read_text(encoding="utf-8"), re.M)
    ]


def selected(expression: str, tests: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The tests a pytest ``-k`` expression selects, by pytest's own expression evaluator (a word matches a
    substring of the file's or the function's name, case-insensitively, as ``-k`` does)."""
    from _pytest.mark.expression import Expression

    compiled = Expression.compile(expression)
    return {test for test in tests if compiled.evaluate(lambda word, t=test: any(word.lower() in n.lower() for n in t))}


@pytest.mark.parametrize("fix", [fix for fix in FIXES if fix.patch.name in fix.series.choices], ids=str)
def test_a_fixs_choice_tests_are_tests_of_the_suite_and_none_of_its_teeth(fix: Fix):
    """``choices`` (parts.toml) are left out of apply's regression run where upstream fixed the bug its own way: they
    must select tests, and never one of the fix's teeth, which judge the bug and stay."""
    tests = regression_tests(TREE.root / "tests" / "regression")
    choices = selected(fix.series.choices[fix.patch.name], tests)
    assert choices, f"{fix}: choices select no test of tests/regression"
    assert not choices & selected(fix.series.teeth[fix.patch.name], tests), f"{fix}: a choice test is a tooth"


# --- the test's own teeth: a fake series of one complete fix, then each part taken away ----------------------------

FAKE_PATCH = "0001-algo-micro-batch-normalization-distillation-loss.patch"  # verl/0002, as the fake series' one patch
FAKE_SLUG = slug_of(FAKE_PATCH)
FAKE_PIN = """[[upstream]]
key = "third"
name = "third"
version = "0.8.0"
sdist_sha256 = "{sha}"
repository = "https://example.invalid/third"
tag = "v0.8.0"
series = "third"
default = true
overlay = true
""".format(sha="0" * 64)
FAKE_TESTS = "def test_the_loss_is_global():\n    pass\n\n\ndef test_elsewhere():\n    pass\n"


def _fake_overlay(patches: tuple[str, ...] = (FAKE_SLUG,)) -> Overlay:
    piece = Piece(name="loss", patches=patches)
    return Overlay(
        name="third_overlay", upstream="third", distribution="third", modules=("third.trainer.losses",), pieces=(piece,)
    )


def _fake_tree(root: Path) -> Tree:
    """A third upstream whose one fix has every part (its overlay given as a spec, as the real ones are read)."""
    files = {
        "patches/upstreams.toml": FAKE_PIN,
        "patches/third/series": f"{FAKE_PATCH}\n",
        "patches/third/groups": "loss-fix 0001\n",
        "patches/third/pr/loss-fix.md": "[algo] fix: the loss\n",
        "patches/third/parts.toml": f'[{FAKE_SLUG}]\nteeth = "the_loss and not elsewhere"\n'
        'audit = ["`the_loss`"]\nharness = "the_loss"\n'
        'parity = ["loss_cases"]\nguard = ["the_loss"]\n',
        "tests/regression/test_the_loss.py": FAKE_TESTS,
        HARNESS_LOSSES: 'LOSSES = ("the_loss",)\n\n\ndef loss_function(loss, mode):\n    if loss == "the_loss":\n'
        "        return None\n",
        PARITY_CASES: "def loss_cases():\n    return {}\n\n\ndef main(out):\n    return {**loss_cases()}\n",
        GUARD_CASES: 'def untouched():\n    seen = {"the_loss": True}\n    return seen\n',
        "patchset/proof/cases.py": 'CASES = (Case("the_loss", "the loss", "lm", Expect.GROWS, patch="third 0001"),)\n',
        "docs/fixes.md": f"**the loss** ([patch](../patches/third/{FAKE_PATCH})): global.\n",
        "README.md": f"| patch | upstream |\n|---|---|\n| [0001](patches/third/{FAKE_PATCH}) | fixed in third 0.9.0 |\n"
        "| [another](patches/third/0002-another.patch) | not fixed |\n",
        "docs/loss-audit.md": "| loss | with this series |\n|---|---|\n| `the_loss` | global: patch third 0001 |\n",
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    (root / "patches" / "third" / FAKE_PATCH).write_bytes(
        (REPO_ROOT / "patches" / "verl" / "0002-algo-micro-batch-normalization-distillation-loss.patch").read_bytes()
    )
    return Tree(root, ((_fake_overlay(), root / "third_overlay"),))


def _remove(relative: str) -> Callable[[Tree], Tree]:
    def take_away(tree: Tree) -> Tree:
        (tree.root / relative).unlink()
        return tree

    return take_away


def _rewrite(relative: str, old: str, new: str) -> Callable[[Tree], Tree]:
    def take_away(tree: Tree) -> Tree:
        path = tree.root / relative
        path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
        return tree

    return take_away


TAKEN_AWAY: dict[str, tuple[Callable[[Tree], Tree], set[str]]] = {
    "group": (_remove("patches/third/groups"), {"group", "pr"}),
    "pr": (_remove("patches/third/pr/loss-fix.md"), {"pr"}),
    "teeth": (_rewrite("patches/third/parts.toml", "elsewhere", "nowhere"), {"teeth"}),
    "overlay": (
        lambda tree: replace(tree, overlays=((_fake_overlay(("another-fix",)), tree.root),)),
        {"overlay", "guard"},  # the objects guarded are its piece's
    ),
    "harness": (_rewrite(HARNESS_LOSSES, 'LOSSES = ("the_loss",)', 'LOSSES = ("other",)'), {"harness"}),
    "parity": (_rewrite(PARITY_CASES, "**loss_cases()", ""), {"parity"}),
    "guard": (_rewrite(GUARD_CASES, '"the_loss"', '"other"'), {"guard"}),
    "gpuproof": (_rewrite("patchset/proof/cases.py", "third 0001", "third 0002"), {"gpuproof"}),
    "fixes": (_remove("docs/fixes.md"), {"fixes"}),
    "readme": (_rewrite("README.md", "fixed in third 0.9.0", "not fixed"), {"readme"}),
    "audit": (_rewrite("docs/loss-audit.md", "third 0001", "third 0002"), {"audit"}),
}


def test_a_fix_with_every_part_passes(tmp_path: Path):
    tree = _fake_tree(tmp_path)
    (fix,) = fixes_of(tree)
    assert missing_parts(tree, fix) == {}
    assert problems(tree, fix) == []


@pytest.mark.parametrize("part", PARTS)
def test_a_fix_missing_a_part_fails_until_a_reason_is_given(tmp_path: Path, part: str):
    take_away, lost = TAKEN_AWAY[part]
    tree = take_away(_fake_tree(tmp_path))
    (fix,) = fixes_of(tree)
    assert set(missing_parts(tree, fix)) == lost
    assert [line.split(": ")[1] for line in problems(tree, fix)] == sorted(lost, key=PARTS.index)

    reasons = "".join(f'{name} = "not needed by the fake"\n' for name in lost)
    with (tree.patches / "third" / PARTS_FILE).open("a", encoding="utf-8") as stream:
        stream.write(f"\n[{FAKE_SLUG}.missing]\n{reasons}")
    (fix,) = fixes_of(tree)
    assert problems(tree, fix) == []


@pytest.mark.parametrize(
    ("part", "changes"),
    [
        ("harness", [("patchset/proof/cases.py", 'Case("the_loss"', 'Case("other"')]),
        ("parity", [("patches/third/parts.toml", '"loss_cases"', '"loss_cases", "other_cases"')]),
    ],
    ids=["gpuproof-case-of-another-key", "a-function-main-does-not-call"],
)
def test_a_declared_part_its_file_does_not_match_fails(tmp_path: Path, part: str, changes: list[tuple[str, str, str]]):
    tree = _fake_tree(tmp_path)
    for relative, old, new in changes:
        _rewrite(relative, old, new)(tree)
    (fix,) = fixes_of(tree)
    assert set(missing_parts(tree, fix)) == {part}


def test_a_readme_row_of_no_patch_fails(tmp_path: Path):
    tree = _fake_tree(tmp_path)
    stale = "README.md links patches/third/0002-another.patch, no patch of its series"
    assert undeclared(tree, fixes_of(tree)) == [stale]
    _rewrite("README.md", "| [another](patches/third/0002-another.patch) | not fixed |\n", "")(tree)
    assert undeclared(tree, fixes_of(tree)) == []


@pytest.mark.parametrize(
    ("row", "expected"),
    [("| `other` | patch third 0001 |", "third 0001 beside '`other`'"), ("| `the_loss` | Third 0002 |", "third 0002")],
    ids=["a-loss-its-audit-does-not-name", "no-such-patch"],
)
def test_an_audit_row_of_no_declared_fix_fails(tmp_path: Path, row: str, expected: str):
    tree = _fake_tree(tmp_path)
    _rewrite("docs/loss-audit.md", "|---|---|\n", f"|---|---|\n{row}\n")(tree)
    found = [problem for problem in undeclared(tree, fixes_of(tree)) if "loss-audit" in problem]
    assert len(found) == 1 and found[0].startswith(f"docs/loss-audit.md names {expected}"), found


def test_a_reason_for_a_part_that_is_there_fails(tmp_path: Path):
    tree = _fake_tree(tmp_path)
    with (tree.patches / "third" / PARTS_FILE).open("a", encoding="utf-8") as stream:
        stream.write(f'\n[{FAKE_SLUG}.missing]\ngpuproof = "stale"\nbench = "no such part"\n')
    (fix,) = fixes_of(tree)
    assert [line.split(": ", 1)[1] for line in problems(tree, fix)] == [
        f"patches/third/{PARTS_FILE} [{FAKE_SLUG}.missing] bench: there is no such part",
        f"patches/third/{PARTS_FILE} [{FAKE_SLUG}.missing] gpuproof: the part is there; drop the reason",
    ]
