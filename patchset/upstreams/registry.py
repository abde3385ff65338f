"""Everything this project knows about verl and Trinity-RFT, in one place: adding an upstream is one entry in
``UPSTREAMS`` plus its series and pins (``patches/upstreams.toml``). The overlays, installed without this package,
keep their own runtime facts beside their code."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from patchset.plumbing.errors import BadInput
from patchset.upstreams import trinity_pr, verl_pr
from patchset.upstreams.lint_hooks import LintHook
from patchset.upstreams.pr_template import PrTemplate

_PY_VERSION = re.compile(r"""^(__version__\s*=\s*)(["'])([^"']*)\2""", re.MULTILINE)


@dataclass(frozen=True)
class SubjectForm:
    """An upstream's PR-title form: what a patch's Subject and a ``pr/<group>.md`` title must match."""

    pattern: re.Pattern[str]
    shown: str  # how the lint names the form


# the form of a series folder that is no upstream's
ANY_SUBJECT_FORM = SubjectForm(re.compile(r"^\[[^\]]+\] \S"), "[area] description")


@dataclass(frozen=True)
class Upstream:
    """One upstream project, by its key in ``upstreams.toml`` (also its series folder)."""

    key: str
    title: str  # how messages name it
    distribution: str  # the PyPI name
    package: str  # the import package
    version_file: str  # where the tree declares its version (relative to the tree)
    marker_file: str  # a file only this upstream's tree has; with the version file, it tells the tree
    tree_variable: str  # the variable the regression suite reads the tree's path from
    test_suffix: str  # upstream's CPU tests: tests/<package path>/<prefix><module>*<suffix>
    test_prefix: str = ""
    # (file, the text that opens its package_data list) where the wheel build adds the manifest; None: MANIFEST.in
    package_data: tuple[str, str] | None = None
    # other upstreams its tests import: a tree of it given alone is tested beside their default and companion pins
    tests_import: tuple[str, ...] = ()
    tests_import_note: str = ""  # what the run says when it adds the default pin of one ("Trinity's loss imports verl")
    companion_note: str = ""  # what it says for a run beside a companion pin ("Trinity on its legacy path")
    # tells the regression suite this tree is there only because another's tests import it; "": none imports it
    role_variable: str = ""
    subject_form: SubjectForm = ANY_SUBJECT_FORM
    pr_template: PrTemplate | None = None  # the layout of the PR body export-pr writes: its upstream's PR template
    lint_hooks: tuple[LintHook, ...] = ()  # its .pre-commit-config.yaml at the pinned release, as run here
    lint_not_run: str = ""  # what of that config is not run here, said in the PR body
    # upstream's tests that cannot run here: all but ``*test_suffix`` when its CI runs them on a GPU; (regex, why)
    gpu_unless_suffix: bool = False
    gpu_naming_source: str = ""
    resource_markers: tuple[tuple[str, str], ...] = ()

    def read_version(self, tree: Path) -> str:
        """The version the tree declares; "" when its version file cannot be read or declares none."""
        try:
            text = (tree / self.version_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""
        if self.version_file.endswith(".py"):
            match = _PY_VERSION.search(text)
            return match[3] if match else ""
        return text.strip()

    def write_version(self, tree: Path, version: str) -> None:
        """Make the tree declare ``version`` where its build and runtime read it."""
        path = tree / self.version_file
        if self.version_file.endswith(".py"):
            text = path.read_text(encoding="utf-8")
            text = _PY_VERSION.sub(lambda m: f"{m[1]}{m[2]}{version}{m[2]}", text, count=1)
        else:
            text = f"{version}\n"
        path.write_text(text, encoding="utf-8")

    def is_test(self, path: str) -> bool:
        """Whether ``path`` (relative to the tree) is one of the upstream's test files."""
        name = path.rsplit("/", 1)[-1]
        if not path.startswith("tests/") or not name.endswith(".py"):
            return False
        return name.startswith("test_") or (not self.test_prefix and name.endswith(self.test_suffix))

    def cpu_test_pattern(self, module_path: str) -> re.Pattern[str] | None:
        """The upstream's CPU test files for the module ``module_path`` (``verl/trainer/ppo/core_algos.py`` ->
        ``tests/trainer/ppo/test_core_algos*_on_cpu.py``); None for a file that is not a module of the package."""
        if not module_path.startswith(f"{self.package}/") or not module_path.endswith(".py"):
            return None
        folder, _, module = module_path[len(self.package) + 1 :].removesuffix(".py").rpartition("/")
        if module == "__init__":
            return None
        where = f"tests/{folder}/" if folder else "tests/"
        stem = f"{re.escape(self.test_prefix)}{re.escape(module)}(_\\w+)?{re.escape(self.test_suffix)}"
        return re.compile(rf"^{re.escape(where)}{stem}$")


UPSTREAMS = {
    "verl": Upstream(
        key="verl",
        title="verl",
        distribution="verl",
        package="verl",
        version_file="verl/version/version",
        marker_file="verl/trainer/ppo/core_algos.py",
        tree_variable="PATCHSET_VERL_TREE",
        test_prefix="test_",
        test_suffix="_on_cpu.py",
        # verl's package-dir {"" = "."} makes include-package-data add nothing: only its package-data reaches a wheel
        package_data=("pyproject.toml", "[tool.setuptools.package-data]\nverl = [\n"),
        role_variable="PATCHSET_VERL_ROLE",
        # verl's CONTRIBUTING.md
        subject_form=SubjectForm(
            re.compile(
                r"^(\[BREAKING\])?\[[a-z0-9_, /-]+\] "
                r"(?i:feat|fix|refactor|chore|test|doc|docs|perf|ci|misc)(\(.+\))?!?: \S"
            ),
            "[module] type: description, [BREAKING] first when it breaks a caller (verl: e.g. [trainer] fix: ...)",
        ),
        pr_template=verl_pr.pr_template,
        lint_hooks=verl_pr.LINT_HOOKS,
        lint_not_run=verl_pr.LINT_NOT_RUN,
        # verl's tests/README.md (verl-project/verl fb3b9a70): "By default tests are run with GPU available, except
        # for the ones under special_npu, and any test script whose name ends with on_cpu.py"
        gpu_unless_suffix=True,
        gpu_naming_source="tests/README.md: only test scripts named *on_cpu.py run on CPU",
    ),
    "trinity": Upstream(
        key="trinity",
        title="Trinity-RFT",
        distribution="trinity-rft",
        package="trinity",
        version_file="trinity/__init__.py",
        marker_file="trinity/trainer/verl/losses.py",
        tree_variable="PATCHSET_TRINITY_TREE",
        test_suffix="_test.py",
        tests_import=("verl",),
        tests_import_note="Trinity's loss imports verl",
        companion_note="Trinity on its legacy path",
        # Trinity-RFT's merged PRs
        subject_form=SubjectForm(
            re.compile(r"^\[[A-Z][A-Za-z0-9 ,/-]*\] [A-Z]"),
            "[Module] Description (Trinity-RFT: e.g. [Trainer] Fix ...)",
        ),
        pr_template=trinity_pr.pr_template,
        lint_hooks=trinity_pr.LINT_HOOKS,
        lint_not_run=trinity_pr.LINT_NOT_RUN,
        # Trinity-RFT names no CPU tests; its tests/tools.py (yanxi-chen/Trinity-RFT 2f1e0201, a fork) has the
        # Ray test bases and the model paths its tests read from the environment
        resource_markers=(
            (r"\bRayUnittestBase|\bray\.init\(", "starts a Ray cluster"),
            (
                r"\bget_(model|api_model|vision_language_model|checkpoint)_path\(",
                "needs a model checkpoint (TRINITY_MODEL_PATH and the like)",
            ),
            (r"\.cuda\(\)|[\"']cuda(:\d+)?[\"']", "runs on a GPU"),
        ),
    ),
}


@dataclass(frozen=True)
class Detected:
    """What a tree is: its ``key`` in upstreams.toml, a label, its version and the file that declares it."""

    key: str
    label: str
    version: str
    marker: str = field(default="", compare=False)


def _either(names: list[str], word: str = "or") -> str:
    return ", ".join(names[:-1]) + f" {word} {names[-1]}" if len(names) > 1 else "".join(names)


def detect(root: Path, shown: str) -> Detected:
    """Detect the upstream at ``root`` (``shown`` is how to name it in messages); raise ``BadInput`` otherwise."""
    titles = _either([upstream.title for upstream in UPSTREAMS.values()])
    if not root.is_dir():
        raise BadInput(f"{shown} is not a directory; pass the root of a {titles} checkout")
    found = [
        Detected(upstream.key, upstream.title, version, marker=upstream.version_file)
        for upstream in UPSTREAMS.values()
        if (root / upstream.marker_file).is_file() and (version := upstream.read_version(root))
    ]
    if not found:
        files = _either([upstream.version_file for upstream in UPSTREAMS.values()])
        raise BadInput(f"{shown} is not a {titles} checkout (no {files})")
    if len(found) > 1:
        held = ("both " if len(found) == 2 else "") + _either([d.label for d in found], "and")
        raise BadInput(f"{shown} holds {held}; pass the root of each tree separately")
    return found[0]
