"""What export-pr knows of Trinity-RFT alone: its PR template and its lint gates."""

from __future__ import annotations

from patchset.upstreams.lint_hooks import check_ast, check_yaml, end_of_file, hook, own_hook, python_tool
from patchset.upstreams.pr_template import ISSUE_FIRST, NOT_DUPLICATE, PrParts

# Trinity's flake8 hook arguments (its .pre-commit-config.yaml).
FLAKE8_ARGS = [
    "--max-line-length=100",
    "--select=C,E,F,W,B,B950",
    "--ignore=E203,E266,E501,W503",
    "--docstring-convention=google",
]
LINT_HOOKS = (
    own_hook("check-ast", "check-ast (pre-commit-hooks)", check_ast, types=["python"]),
    own_hook("check-yaml", "check-yaml (pre-commit-hooks)", check_yaml, types=["yaml"]),
    hook(
        "trailing-whitespace", "trailing-whitespace (pre-commit-hooks)", r"[ \t]+$", language="pygrep", types=["text"]
    ),
    own_hook("end-of-file-fixer", "end-of-file-fixer (pre-commit-hooks)", end_of_file, types=["text"]),
    python_tool("black", "black 23.7.0 (Trinity's pyproject)", "black", args=["--line-length=100"]),
    python_tool("isort", "isort 5.12.0 --profile black", "isort", args=["--profile", "black", "--filter-files"]),
    python_tool("flake8", "flake8 6.1.0 + flake8-docstrings", "flake8", args=FLAKE8_ARGS, types=["python"]),
)
# what of Trinity's config is not run here, said in the PR body
LINT_NOT_RUN = (
    "mypy v1.7.0 (the lock pins verl's mypy 1.17.0); pre-commit-hooks check-xml/check-toml/check-json/"
    "check-docstring-first/detect-private-key (pre-commit-hooks is not in the lock; trailing-whitespace, "
    "end-of-file-fixer, check-yaml and check-ast are run as local hooks)"
)


def pr_template(parts: PrParts) -> str:
    """Trinity-RFT's .github/pull_request_template.md: a Description, then its Checklist."""
    return "\n".join(
        [
            "## Description",
            "",
            *(line for paragraph in parts.overview for line in (paragraph, "")),
            *parts.related,
            "",
            *parts.other_sections((NOT_DUPLICATE, ISSUE_FIRST), "###"),
            "Tests run:",
            *parts.tests,
            "",
            *parts.declarations("###"),
            "## Checklist",
            "",
            "Please check the following items before code is ready to be reviewed.",
            "",
            f"- [{'x' if parts.passed else ' '}]  Code has passed all tests",
            "- [x]  Docstrings have been added/updated in Google Style",
            "- [ ]  Documentation has been updated",
            "- [ ]  Code is ready for review",
            "",
        ]
    )
