"""The import layers: every module imports only its own part or a part on a lower layer.

The tooling (``patchset``) and the overlays stand apart; within each, a part may import only the parts below it.
An import inside a function counts as much as one at the top: it is an arrow all the same. Imports of other
packages (stdlib, torch, verl) are not this test's concern.

Beside them, the code that runs from the checkout: the tooling (``patchset``, the test command, the proof and the
benchmarks included), the scripts (``scripts/``) and the engine harness (``engine_harness``) import no test code, and
the tooling and the harness no script, whether as a package or as a flat module from a folder put on ``sys.path``;
none of the scripts, the harness nor ``tests/overlay`` names a test folder to put on ``sys.path``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

# part -> layer; a part is a top-level package, or a subpackage of ``patchset``
TOOLING_LAYERS: Mapping[str, int] = {
    "patchset": 0,  # the package's own __init__: a docstring
    "patchset.plumbing": 0,
    "patchset.upstreams": 1,
    "patchset.series": 2,
    "patchset.testenv": 2,
    "patchset.apply": 3,
    "patchset.export": 3,
    "patchset.wheels": 4,
    "patchset.proof": 4,  # the proof on your own GPUs (and the end-to-end test's figure)
    "patchset.bench": 4,  # what the fix costs
    "patchset.doctor": 4,  # is my run affected? (python -m patchset doctor)
    "patchset.testcommand": 5,  # the test command: only its command line (patchset.cli.test) imports it
    "patchset.cli": 6,
    "patchset.__main__": 7,
}
OVERLAY_LAYERS: Mapping[str, int] = {
    "patchset_overlay": 0,
    "verl_overlay": 1,
    "trinity_overlay": 1,
    "patchset_overlay_registry": 2,  # names the overlays (the core reads it by name): imports nothing
    "hydra_plugins": 2,  # Hydra's search-path plugin for the verl overlay's configs
}
LAYERS: Mapping[str, Mapping[str, int]] = {"tooling": TOOLING_LAYERS, "overlays": OVERLAY_LAYERS}
SPLIT_PACKAGES = ("patchset",)  # packages whose subpackages (and modules) are parts of their own


def part_of(module: str) -> str | None:
    """The part ``module`` belongs to, or None for a package outside this repo's code."""
    top, _, rest = module.partition(".")
    if top in SPLIT_PACKAGES:
        return f"{top}.{rest.split('.')[0]}" if rest else top
    return top if top in OVERLAY_LAYERS else None


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, name: str) -> Iterator[str]:
    """Every module ``path`` imports, anywhere in it; relative imports resolved against ``name``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield module
            if module in SPLIT_PACKAGES:  # ``from patchset import cli`` imports the subpackage cli
                yield from (f"{module}.{alias.name}" for alias in node.names)


def upward_imports(root: Path, packages: Mapping[str, int]) -> list[str]:
    """``importer -> imported`` for each import of a part not below the importer's, nor its own."""
    every_layer = {**TOOLING_LAYERS, **OVERLAY_LAYERS}
    found = []
    tops = {part.split(".")[0] for part in packages}
    for top in sorted(tops):
        for path in sorted((root / top).rglob("*.py")):
            name = module_name(root, path)
            own = part_of(name)
            if own not in packages:
                continue
            for imported in imported_modules(path, name):
                target = part_of(imported)
                if target is None or target == own:
                    continue
                if target in SPLIT_PACKAGES and imported != target:  # ``from patchset import cli``: the subpackage
                    continue
                if target not in packages or every_layer[target] >= packages[own]:
                    found.append(f"{name} -> {imported}")
    return sorted(set(found))


@pytest.mark.parametrize("family", sorted(LAYERS))
def test_no_module_imports_a_part_on_its_own_layer_or_above(family):
    assert upward_imports(REPO_ROOT, LAYERS[family]) == []


def test_every_part_of_the_tooling_has_a_layer():
    parts = {part_of(module_name(REPO_ROOT, path)) for path in (REPO_ROOT / "patchset").rglob("*.py")}
    assert parts <= set(TOOLING_LAYERS), sorted(parts - set(TOOLING_LAYERS))


def test_the_tooling_does_not_import_the_commands_that_stand_on_it(tmp_path):
    (tmp_path / "patchset" / "series").mkdir(parents=True)
    (tmp_path / "patchset" / "proof").mkdir()
    (tmp_path / "patchset" / "__init__.py").write_text("")
    (tmp_path / "patchset" / "series" / "__init__.py").write_text("from patchset.proof import cases\n")
    (tmp_path / "patchset" / "proof" / "lock.py").write_text(
        "from patchset.upstreams import pins\nfrom .. import bench\n"
    )
    assert upward_imports(tmp_path, TOOLING_LAYERS) == [
        "patchset.proof.lock -> patchset.bench",
        "patchset.series -> patchset.proof",
    ]


def test_an_import_inside_a_function_counts_as_an_arrow(tmp_path):
    plumbing = tmp_path / "patchset" / "plumbing"
    plumbing.mkdir(parents=True)
    (tmp_path / "patchset" / "__init__.py").write_text("")
    (plumbing / "__init__.py").write_text("from . import merge\n")
    (plumbing / "merge.py").write_text("def f():\n    from ..series import model\n    from patchset.cli import main\n")
    assert upward_imports(tmp_path, TOOLING_LAYERS) == [
        "patchset.plumbing.merge -> patchset.cli",
        "patchset.plumbing.merge -> patchset.series",
    ]


def _code_strings(path: Path) -> Iterator[str]:
    """The string constants of ``path`` that are not docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def test_the_overlay_core_names_no_overlay_even_in_a_string():
    """The core finds its overlays through the registry; a name in a string would be an import all the same."""
    overlays = [part for part, layer in OVERLAY_LAYERS.items() if layer == 1]
    named = [
        f"{path.relative_to(REPO_ROOT)}: {text!r}"
        for path in sorted((REPO_ROOT / "patchset_overlay").rglob("*.py"))
        for text in _code_strings(path)
        if any(overlay in text for overlay in overlays)
    ]
    assert named == []


def _module_paths(root: Path, tops: Iterator[str] | tuple[str, ...]) -> dict[str, Path]:
    """Every module of the packages ``tops`` under ``root``, by name (a package by its own name, for __init__)."""
    return {module_name(root, path): path for top in tops for path in sorted((root / top).rglob("*.py"))}


def import_cycles(root: Path, tops: tuple[str, ...]) -> list[list[str]]:
    """The cycles among the modules of ``tops``, each as the modules it goes through: an import that runs back up,
    e.g. a module that imports its own package's ``__init__`` while that imports the module (at the top or inside a
    function: an arrow all the same). ``from package import name`` points at the module ``package.name`` where
    there is one, else at the package; the parent packages Python imports first are not arrows of the code."""
    paths = _module_paths(root, tops)
    arrows: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
                module = ".".join(part for part in (base, node.module or "") if part)
                targets |= {f"{module}.{a.name}" if f"{module}.{a.name}" in paths else module for a in node.names}
        arrows[name] = {target for target in targets if target in paths and target != name}
    cycles, done = [], set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append([*trail[trail.index(name) :], name])
            return
        if name in done:
            return
        for target in sorted(arrows[name]):
            visit(target, [*trail, name])
        done.add(name)

    for name in sorted(arrows):
        visit(name, [])
    return cycles


@pytest.mark.parametrize("family", sorted(LAYERS))
def test_no_import_runs_back_up_within_a_part_either(family):
    """No module is imported, directly or not, by a module it imports: in the overlay core, its package front
    imports its layers and none of them imports the front."""
    assert import_cycles(REPO_ROOT, tuple(sorted({part.split(".")[0] for part in LAYERS[family]}))) == []


def test_a_module_importing_its_packages_init_that_imports_it_back_is_a_cycle(tmp_path):
    core = tmp_path / "core"
    core.mkdir()
    (core / "__init__.py").write_text("def go():\n    from core.runtime import run\n")
    (core / "runtime.py").write_text("from core import go\nfrom core import startup\n")
    (core / "startup.py").write_text("import os\n")
    assert import_cycles(tmp_path, ("core",)) == [["core", "core.runtime", "core"]]


# code that runs from the checkout -> the folders whose code it must not import
NO_TEST_CODE: Mapping[str, tuple[str, ...]] = {
    "patchset": ("tests", "scripts"),
    "scripts": ("tests",),
    "engine_harness": ("tests", "scripts"),
}


def flat_names(root: Path, folder: str) -> set[str]:
    """The top-level names the code of ``folder`` is imported by: the folder itself as a package, and each module
    and package in it as a flat name (a folder of it put on ``sys.path``)."""
    paths = list((root / folder).rglob("*.py"))
    return (
        {folder}
        | {path.stem for path in paths if path.stem != "__init__"}
        | {path.parent.name for path in paths if path.name == "__init__.py"}
    )


def imports_of_code_in(root: Path, importer: str, forbidden: Sequence[str]) -> list[str]:
    """``module -> imported`` for each import in ``importer`` of code of the ``forbidden`` folders."""
    names = set().union(*(flat_names(root, folder) for folder in forbidden))
    return sorted(
        {
            f"{module_name(root, path)} -> {imported}"
            for path in sorted((root / importer).rglob("*.py"))
            for imported in imported_modules(path, module_name(root, path))
            if imported.split(".")[0] in names
        }
    )


@pytest.mark.parametrize("importer", sorted(NO_TEST_CODE))
def test_the_code_run_from_the_checkout_imports_no_test_code(importer):
    assert imports_of_code_in(REPO_ROOT, importer, NO_TEST_CODE[importer]) == []


def _test_folders() -> list[str]:
    return sorted(path.name for path in (REPO_ROOT / "tests").iterdir() if (path / "conftest.py").exists())


# folder -> the test folders its code must not name (tests/overlay: the regression suite's, its former sys.path entry)
PATH_REACHES = {"scripts": None, "engine_harness": None, "tests/overlay": ("regression",)}


@pytest.mark.parametrize("folder", sorted(PATH_REACHES))
def test_no_code_puts_a_test_folder_on_the_path(folder):
    """``REPO_ROOT / "tests" / "regression"`` on ``sys.path`` is an import of test code all the same."""
    folders = PATH_REACHES[folder] or ("tests", *_test_folders())
    named = [
        f"{path.relative_to(REPO_ROOT)}: {text!r}"
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
        for text in _code_strings(path)
        if text in folders or "/".join(Path(text).parts[:2]) in {f"tests/{name}" for name in folders}
    ]
    assert named == []


def test_a_flat_import_of_a_test_module_counts(tmp_path):
    (tmp_path / "tests" / "regression").mkdir(parents=True)
    (tmp_path / "tests" / "regression" / "engine_sim.py").write_text("")
    (tmp_path / "scripts" / "proof").mkdir(parents=True)
    (tmp_path / "scripts" / "proof" / "__init__.py").write_text("")
    (tmp_path / "scripts" / "proof" / "rank.py").write_text("def f():\n    from engine_sim import Split\n")
    (tmp_path / "scripts" / "bench.py").write_text("import tests.regression.engine_sim\n")
    assert imports_of_code_in(tmp_path, "scripts", ("tests",)) == [
        "scripts.bench -> tests.regression.engine_sim",
        "scripts.proof.rank -> engine_sim",
    ]
