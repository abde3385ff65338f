"""What export-pr knows of verl alone: its PR template and its lint gates, with the checks that live in verl's
repository as scripts (tests/special_sanity/), not in the sdist, written again here."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from patchset.upstreams.lint_hooks import hook, own_hook, python_tool
from patchset.upstreams.pr_template import ISSUE_FIRST, NOT_DUPLICATE, PrParts

RUFF_ARGS = ("--fix", "--show-fixes", "--output-format=full")  # verl's ruff hook (its .pre-commit-config.yaml)
# verl's mypy hook: pre-commit/mirrors-mypy v1.17.0 with that hook's default arguments (verl sets none).
MYPY_ARGS = ("--ignore-missing-imports", "--scripts-are-modules")
# verl's flattened reference configs: each file's header names the print_cfg.py command that made it, which differs by
# release (0.8.0: "ppo_trainer" with "model_engine=megatron"; 0.7.x: "--config-name=ppo_megatron_trainer.yaml")
GENERATED_GLOB = "_generated_*.yaml"
PRINT_CFG = re.compile(
    r"print_cfg\.py --cfg job(?: --config-name=(?P<config>[^\s'.]+)(?:\.yaml)?)?(?P<overrides>[^']*)'"
)
CONFIG_DIR = "verl/trainer/config"
DOCSTRING_FILES = ("verl/trainer/ppo/core_algos.py",)
# The Apache-2.0 header lines every verl .py file carries after its "# Copyright <year> <holder>" line(s).
LICENSE_LINES = (
    '# Licensed under the Apache License, Version 2.0 (the "License");',
    "# you may not use this file except in compliance with the License.",
    "# You may obtain a copy of the License at",
    "#     http://www.apache.org/licenses/LICENSE-2.0",
)
_COPYRIGHT = re.compile(r"^# Copyright (\(c\) )?\d{4}(-\d{4})?,? \S")
_LICENSE_SCAN_LINES = 20
SECTIONS = ("Test", "API and Usage Example", "Design & Code Changes")
CONTRIBUTING = "https://github.com/verl-project/verl/blob/main/CONTRIBUTING.md"


def pr_template(parts: PrParts) -> str:
    """verl's .github/PULL_REQUEST_TEMPLATE.md, section by section (verl-project/verl, main 1dda039b9)."""
    lint = "x" if parts.passed else " "
    return "\n".join(
        [
            "### What does this PR do?",
            "",
            *(line for paragraph in parts.overview for line in (paragraph, "")),
            *parts.related,
            "",
            "### Checklist Before Starting",
            "",
            *parts.section("Checklist Before Starting", "- [x] Search for similar PRs."),
            "- [x] Format the PR title as `[{modules}] {type}: {description}`",
            "",
            "### Test",
            "",
            *parts.section("Test"),
            "",
            *parts.tests,
            "",
            "### API and Usage Example",
            "",
            *parts.section("API and Usage Example", "No API change."),
            "",
            "### Design & Code Changes",
            "",
            *parts.section("Design & Code Changes", "See the diff."),
            "",
            *parts.other_sections((*SECTIONS, "Checklist Before Starting", NOT_DUPLICATE, ISSUE_FIRST)),
            *parts.declarations("###"),
            "### Checklist Before Submitting",
            "",
            f"- [x] Read the [Contribute Guide]({CONTRIBUTING}).",
            f"- [{lint}] Apply [pre-commit checks]({CONTRIBUTING}#code-linting-and-formatting)",
            "- [ ] Add / Update [the documentation](https://github.com/verl-project/verl/tree/main/docs).",
            f"- [{'x' if parts.new_tests else ' '}] Add unit or end-to-end test(s) to [the CI workflow]"
            "(https://github.com/verl-project/verl/tree/main/.github/workflows) to cover all the code.",
            "- [ ] Once your PR is ready for CI, send a message in the `ci-request` channel.",
            "",
        ]
    )


def check_license(files: Sequence[str]) -> list[str]:
    """Each file opens with a copyright line and the Apache-2.0 header."""
    problems = []
    for name in files:
        head = Path(name).read_text(encoding="utf-8", errors="replace").splitlines()[:_LICENSE_SCAN_LINES]
        if not any(_COPYRIGHT.match(line) for line in head):
            problems.append(f"{name}: no '# Copyright <year> <holder>' line in its license header")
        stripped = [line.rstrip() for line in head]
        if missing := [line for line in LICENSE_LINES if line not in stripped]:
            problems.append(f"{name}: the Apache-2.0 license header lacks {missing[0]!r}")
    return problems


def _public_definitions(tree: ast.Module) -> Iterator[tuple[int, str, ast.AST]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not node.name.startswith("_"):
            yield node.lineno, node.name, node
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef) and not sub.name.startswith("_"):
                        yield sub.lineno, f"{node.name}.{sub.name}", sub


def check_docstrings(files: Sequence[str]) -> list[str]:
    """Every public function, class and method has a docstring."""
    problems = []
    for name in files:
        try:
            tree = ast.parse(Path(name).read_text(encoding="utf-8"), filename=name)
        except SyntaxError as exc:
            problems.append(f"{name}:{exc.lineno}: cannot parse: {exc.msg}")
            continue
        for line, qualname, node in _public_definitions(tree):
            if ast.get_docstring(node) is None:  # type: ignore[arg-type]
                problems.append(f"{name}:{line}: public {qualname} has no docstring")
    return problems


def _generation(header: str) -> tuple[str, list[str]] | None:
    """(config name, overrides) of the print_cfg.py command a generated config's header names, if any."""
    match = PRINT_CFG.search(header)
    return None if match is None else (match["config"] or "ppo_trainer", match["overrides"].split())


def check_generated_config(_files: Sequence[str]) -> list[str]:
    """Every flattened config the tree has equals the Hydra composition its header names."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    config_dir = Path(CONFIG_DIR).resolve()
    problems = []
    for path in sorted(config_dir.glob(GENERATED_GLOB)):
        where = f"{CONFIG_DIR}/{path.name}"
        generation = _generation(path.read_text(encoding="utf-8")[:2000])
        if generation is None:
            problems.append(f"{where}: its header names no 'print_cfg.py --cfg job ...' command to compare it with")
            continue
        config_name, overrides = generation
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            composed = OmegaConf.to_container(compose(config_name=config_name, overrides=overrides), resolve=False)
        flat = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        assert isinstance(composed, dict) and isinstance(flat, dict)
        composed.pop("model_engine", None)  # the defaults-list choice, which print_cfg.py does not write
        for section in sorted(set(composed) | set(flat), key=str):
            if composed.get(section) != flat.get(section):
                problems.append(
                    f"{where}: section {section!r} differs from the Hydra composition of {config_name} "
                    f"{' '.join(overrides)}".rstrip()
                    + "; regenerate it (verl's scripts/generate_trainer_config.sh)"
                )
    if not problems and not any(config_dir.glob(GENERATED_GLOB)):
        problems.append(f"{CONFIG_DIR}: no {GENERATED_GLOB} to check")
    return problems


LINT_HOOKS = (
    python_tool("ruff", "ruff v0.12.2 (verl's pyproject)", "ruff", "check", "--force-exclude", args=RUFF_ARGS),
    python_tool("ruff-format", "ruff-format v0.12.2", "ruff", "format", "--force-exclude"),
    python_tool("mypy", "mypy v1.17.0 (verl's pyproject)", "mypy", args=MYPY_ARGS),
    own_hook(
        "autogen-trainer-cfg",
        "generated trainer configs match their Hydra composition",
        check_generated_config,
        files=rf"^{CONFIG_DIR}/",
        pass_filenames=False,
    ),
    own_hook(
        "check-docstrings",
        "docstring coverage (core_algos.py)",
        check_docstrings,
        files="^(" + "|".join(re.escape(f) for f in DOCSTRING_FILES) + ")$",
    ),
    own_hook(
        "check-license",
        "Apache license header",
        check_license,
        types=["python"],
        files=r"^(examples|recipe|scripts|tests|verl)/|^setup\.py$",
    ),
    hook("compileall", "compileall", "python", "-m", "compileall", "-q", types=["python"]),
)
# what of verl's config is not run here, said in the PR body
LINT_NOT_RUN = (
    "verl's repository-only hooks (tests/special_sanity/ scripts, not in the sdist) other than the license, docstring "
    "and generated-config checks run above"
)
