"""Gates that passed, remembered by the sha256 of exactly what they ran on, so that an unchanged branch is not gated
twice. Anything not pinned by content (uncommitted files, no lock stamp) gives no key; failures always run again."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing import files, tempdirs
from patchset.plumbing.gitops import git_value, run_git

# the file ``testenv.venv.ensure_venv`` writes once the venv matches its lock (kept in step by a test)
VENV_STAMP = ".patchset-lock-sha256"


@dataclass(frozen=True)
class Passed:
    """What a remembered pass printed: its one-line summary, its whole output, and when it ran."""

    summary: str
    output: str
    recorded: str


def reused(recorded: str) -> str:
    """What a gate's summary adds when its pass was recalled, not run."""
    return f"; the same gate passed on exactly this content at {recorded}: not run again (--rerun-gates runs it)"


def _clean_tree_sha(tree: Path) -> str | None:
    """The git tree ``tree``'s HEAD holds, if the work tree is exactly that (nothing changed, nothing untracked)."""
    top = git_value(tree, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != tree.resolve():
        return None
    status = run_git(["status", "--porcelain", "--untracked-files=all"], cwd=tree, check=False)
    if status.returncode != 0 or status.stdout.strip():
        return None
    return git_value(tree, "rev-parse", "-q", "--verify", "HEAD^{tree}")


def gate_key(kind: str, trees: Sequence[Path], python: Path, inputs: Sequence[str], code: Sequence[Path]) -> str | None:
    """The content key of gate ``kind`` on ``trees`` with ``python``, ``inputs`` and ``code``; None when not pinned."""
    shas = [sha for tree in trees if (sha := _clean_tree_sha(tree)) is not None]
    stamp = python.parent.parent / VENV_STAMP
    if len(shas) < len(trees) or not stamp.is_file():
        return None
    parts = [kind, *inputs, *shas, stamp.read_text(encoding="utf-8").strip()]
    parts += [hashlib.sha256(path.read_bytes()).hexdigest() for path in code]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def recall(directory: Path | None, key: str | None) -> Passed | None:
    """The pass remembered under ``key``, if any (an unreadable record counts as none)."""
    if directory is None or key is None:
        return None
    try:
        record = json.loads((directory / f"{key}.json").read_text(encoding="utf-8"))
        return Passed(summary=record["summary"], output=record["output"], recorded=record["recorded"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember(directory: Path | None, key: str | None, summary: str, output: str) -> None:
    """Record a pass under ``key``, written whole or not at all (``write_durably``: the last rename wins)."""
    if directory is None or key is None:
        return
    directory.mkdir(parents=True, exist_ok=True)
    tempdirs.sweep(directory)
    recorded = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    record = json.dumps({"summary": summary, "output": output, "recorded": recorded})
    files.write_durably(directory / f"{key}.json", record.encode("utf-8"))
