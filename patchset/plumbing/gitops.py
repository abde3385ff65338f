"""Project-agnostic git plumbing: callers get plain results or a ``GitError`` carrying git's own message."""

from __future__ import annotations

import email.utils
import enum
import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing import files, patchtext, tempdirs

# keeps the user's or a repository's settings (hooks, signing, line endings, encoding) out of what git writes
NEUTRAL_CONFIG = {
    "core.hooksPath": "/dev/null",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
    "core.autocrlf": "false",
    "i18n.commitEncoding": "UTF-8",
}


def config_args(config: Mapping[str, str]) -> list[str]:
    """``-c key=value`` options for ``git`` itself, one pair per setting."""
    return [arg for key, value in config.items() for arg in ("-c", f"{key}={value}")]


NEUTRAL = tuple(config_args(NEUTRAL_CONFIG))
# git am that records a patch as it is: "[area]" kept in the subject (only "[PATCH ...]" goes), CRs too, no fixing
AM_OPTIONS = (
    "--keep-non-patch",
    "--keep-cr",
    "--no-scissors",
    "--no-message-id",
    "--no-3way",
    "--whitespace=nowarn",
    "--quiet",
)


class GitError(Exception):
    """A git command failed; ``str()`` gives the command and git's stderr."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        self.git_args = tuple(args)
        self.returncode = returncode
        self.stderr = stderr.strip()
        last = self.stderr.splitlines()[-1] if self.stderr else f"exit status {returncode}"
        super().__init__(f"git {' '.join(self.git_args)}: {last}")


@dataclass(frozen=True)
class Identity:
    """A fixed author/committer, so that commits made by the tool are reproducible."""

    name: str
    email: str
    date: str

    def env(self) -> dict[str, str]:
        fields = {"NAME": self.name, "EMAIL": self.email, "DATE": self.date}
        return {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER") for key, value in fields.items()}


def isolated_env(**extra: str) -> dict[str, str]:
    """The environment and ``extra``, with the user's global and system git config off (for trees the tool owns)."""
    isolated = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}
    return {**os.environ, **isolated, **extra}


def committer_env(author: str, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ``author`` (``Name <email>``) the committer of the commits made with it."""
    name, address = email.utils.parseaddr(author)
    return {**env, "GIT_COMMITTER_NAME": name or address, "GIT_COMMITTER_EMAIL": address}


def run_git(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    binary: bool = False,
    stdin: str | None = None,
) -> subprocess.CompletedProcess:
    """Run ``git ARGS`` in ``cwd`` (stdout ``bytes`` when ``binary``); ``GitError`` on failure when ``check``. git runs
    in a session of its own, so a Ctrl-C reaches only this process (``signals.py``): no ``git apply`` is cut short."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            input=stdin.encode("utf-8", "surrogateescape") if stdin is not None else None,
            capture_output=True,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise GitError(args, 127, "git not found; install git and put it on PATH") from None
    stdout = proc.stdout if binary else proc.stdout.decode("utf-8", "surrogateescape")
    stderr = proc.stderr.decode("utf-8", "replace")
    if check and proc.returncode != 0:
        raise GitError(args, proc.returncode, stderr)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@dataclass(frozen=True)
class WorkTree:
    """A directory inside a git work tree; ``prefix``: ``root`` below ``toplevel`` ("" or ending in "/")."""

    root: Path
    toplevel: Path
    prefix: str


def find_worktree(path: Path) -> WorkTree | None:
    """The git work tree that holds ``path``, or None; ``GitError`` when git refuses otherwise ("dubious ownership")."""
    args = ["rev-parse", "--show-toplevel", "--show-prefix"]
    proc = run_git(args, cwd=path, check=False)
    if proc.returncode != 0:
        if "not a git repository" in proc.stderr or "must be run in a work tree" in proc.stderr:
            return None
        raise GitError(args, proc.returncode, proc.stderr)
    toplevel, prefix, *_ = [*proc.stdout.splitlines(), "", ""]
    if not toplevel:
        return None  # e.g. inside a .git directory
    return WorkTree(root=path.resolve(), toplevel=Path(toplevel), prefix=prefix)


def objects_dir(tree: WorkTree) -> Path | None:
    """The object store of the repository holding ``tree`` (shared by its worktrees), or None."""
    path = git_value(tree.root, "rev-parse", "--git-path", "objects")
    return (tree.root / path).resolve() if path is not None and (tree.root / path).is_dir() else None


def git_dir(tree: WorkTree) -> Path:
    """The git directory of ``tree``'s work tree: a linked worktree's own, where git keeps its ``index.lock``."""
    return Path(run_git(["rev-parse", "--absolute-git-dir"], cwd=tree.root).stdout.strip())


def is_tracked(tree: WorkTree, rel: str) -> bool:
    """True when the file ``rel`` (relative to ``tree.root``) is in the index."""
    return run_git(["ls-files", "--error-unmatch", "--", rel], cwd=tree.root, check=False).returncode == 0


def has_head(tree: WorkTree) -> bool:
    return run_git(["rev-parse", "--verify", "-q", "HEAD^{commit}"], cwd=tree.root, check=False).returncode == 0


def status_paths(tree: WorkTree) -> dict[str, str]:
    """{path relative to ``tree.root``: porcelain XY code} of uncommitted changes below it (untracked included, both
    sides of a rename); ``--no-optional-locks``, so that asking does not rewrite the index."""
    proc = run_git(
        ["--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", "."], cwd=tree.root
    )
    fields = iter(proc.stdout.split("\0"))
    result: dict[str, str] = {}
    for entry in fields:
        if len(entry) < 4:
            continue
        code, paths = entry[:2], [entry[3:]]
        if code[0] in "RC" or code[1] in "RC":
            paths.append(next(fields))  # the source of a rename/copy follows as its own field
        for full in paths:
            if full.startswith(tree.prefix):
                result[full[len(tree.prefix) :]] = code
    return result


@dataclass(frozen=True)
class Blob:
    mode: str
    data: bytes


def head_blobs(tree: WorkTree, paths: Iterable[str]) -> dict[str, Blob]:
    """The HEAD versions of ``paths`` (relative to ``tree.root``) that HEAD has as files or symlinks."""
    wanted = sorted(set(paths))
    if not wanted or not has_head(tree):
        return {}
    listing = run_git(["ls-tree", "-z", "--full-name", "HEAD", "--", *wanted], cwd=tree.root).stdout
    blobs: dict[str, Blob] = {}
    for entry in filter(None, listing.split("\0")):
        meta, full = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind != "blob" or not full.startswith(tree.prefix):
            continue
        data = run_git(["cat-file", "blob", sha], cwd=tree.root, binary=True).stdout
        blobs[full[len(tree.prefix) :]] = Blob(mode=mode, data=data)
    return blobs


def read_blobs(repo: Path, ids: Iterable[str]) -> dict[str, bytes]:
    """The content of each blob of ``ids`` that the repository at ``repo`` has (one ``git cat-file --batch``)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    out = run_git(["cat-file", "--batch"], cwd=repo, binary=True, stdin="\n".join(wanted) + "\n").stdout
    found: dict[str, bytes] = {}
    at = 0
    while at < len(out):
        end = out.index(b"\n", at)
        header = out[at:end].split()
        at = end + 1
        if len(header) == 3:
            size = int(header[2])
            found[header[0].decode()] = out[at : at + size]
            at += size + 1
    return found


def init_commit_tag(path: Path, *, message: str, tag: str, identity: Identity) -> None:
    """Make ``path`` a repository holding all its files in one reproducible commit, tagged ``tag``."""
    env = isolated_env(**identity.env())
    run_git([*NEUTRAL, "init", "-q", "--initial-branch=main"], cwd=path, env=env)
    run_git([*NEUTRAL, "add", "-A", "-f"], cwd=path, env=env)
    run_git([*NEUTRAL, "commit", "-q", "--no-verify", "--allow-empty", "-m", message], cwd=path, env=env)
    run_git([*NEUTRAL, "tag", tag], cwd=path, env=env)


def git_value(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str | None:
    """What ``git ARGS`` prints in ``cwd``, stripped; None when it fails or prints nothing (a failure is an answer)."""
    proc = run_git(list(args), cwd=cwd, env=env, check=False)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def git_text(cwd: Path, *args: str) -> str:
    """What ``git ARGS`` (with ``NEUTRAL``) prints in ``cwd``; ``GitError`` when it fails."""
    return run_git([*NEUTRAL, *args], cwd=cwd).stdout


def commit_of(path: Path, rev: str) -> str | None:
    """The commit ``rev`` names in the repository at ``path``, or None."""
    return git_value(path, "rev-parse", "-q", "--verify", f"{rev}^{{commit}}")


def tag_commit(path: Path, tag: str) -> str | None:
    return commit_of(path, f"refs/tags/{tag}")


def head_commit(path: Path) -> str | None:
    return commit_of(path, "HEAD")


def is_ancestor(path: Path, ancestor: str, commit: str) -> bool:
    return run_git(["merge-base", "--is-ancestor", ancestor, commit], cwd=path, check=False).returncode == 0


def in_progress(path: Path, states: Iterable[str], env: Mapping[str, str] | None = None) -> bool:
    """Whether one of git's ``states`` (``rebase-merge``, ``MERGE_HEAD``, ...) is under way in the checkout."""
    return any((path / (git_value(path, "rev-parse", "--git-path", s, env=env) or s)).exists() for s in states)


def is_clean(path: Path) -> bool:
    """True when the work tree at ``path`` has no uncommitted changes (untracked files count)."""
    proc = run_git(["--no-optional-locks", "status", "--porcelain", "--untracked-files=normal"], cwd=path)
    return proc.stdout == ""


def clone_local(source: Path, dest: Path) -> None:
    """``git clone`` a local repository into ``dest`` (which must not exist)."""
    run_git([*NEUTRAL, "clone", "-q", str(source), str(dest)], cwd=dest.parent, env=isolated_env())


def init_scratch(path: Path) -> None:
    """Make ``path`` its own (empty) repository, so git commands there never reach an enclosing one."""
    run_git([*NEUTRAL, "init", "-q"], cwd=path, env=isolated_env())


def scratch_copy(root: Path, paths: Iterable[str], into: Path) -> Path:
    """``paths`` of the tree at ``root`` copied into ``into``, a new folder made an empty git repository."""
    into.mkdir()
    init_scratch(into)
    files.copy_paths(root, into, paths)
    return into


@dataclass(frozen=True)
class ApplyResult:
    ok: bool
    stderr: str


def apply_patch(
    cwd: Path,
    patch: Path,
    *,
    reverse: bool = False,
    check: bool = False,
    directory: str = "",
    include: Sequence[str] = (),
) -> ApplyResult:
    """``git apply [--check] [--reverse] PATCH`` on the work tree at ``cwd`` (never the index); atomic per patch.
    ``--whitespace=nowarn``: a user's ``apply.whitespace=fix`` would make reversing it inexact. ``directory``: the
    tree's prefix below ``cwd``, the top of its work tree."""
    flags = {"--check": check, "--reverse": reverse, f"--directory={directory.rstrip('/')}": bool(directory)}
    args = ["apply", "--whitespace=nowarn", *(flag for flag, wanted in flags.items() if wanted)]
    args += [*(f"--include={path}" for path in include), str(patch.resolve())]
    proc = run_git(args, cwd=cwd, check=False)
    return ApplyResult(ok=proc.returncode == 0, stderr=proc.stderr.strip())


class Merge(enum.Enum):
    RESOLVES = "resolves"  # merges cleanly
    CONFLICTS = "conflicts"  # merging leaves conflicts in ``detail``
    UNAVAILABLE = "unavailable"  # the repository lacks the blob the patch was made against
    APPLIED = "applied"  # merging changes nothing: the change is in the file already


@dataclass(frozen=True)
class MergeResult:
    outcome: Merge
    detail: str = ""


def three_way(
    root: Path, patch: Path, paths: Sequence[str], objects: Path | None, *, install: bool = False
) -> MergeResult:
    """Merge ``patch`` into ``paths`` under ``root`` on a scratch copy with the blobs of ``objects`` borrowed
    read-only; copy the result into ``root`` only when ``install`` and the merge is clean."""
    if objects is None:
        return MergeResult(Merge.UNAVAILABLE, "the tree has no git objects")
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("merge")) as tmp:
        scratch = scratch_copy(root, paths, Path(tmp) / "scratch")
        env = isolated_env(GIT_ALTERNATE_OBJECT_DIRECTORIES=str(objects))
        run_git([*NEUTRAL, "add", "-A", "-f"], cwd=scratch, env=env)
        args = [*NEUTRAL, "apply", "--3way", "--whitespace=nowarn", str(patch.resolve())]
        proc = run_git(args, cwd=scratch, env=env, check=False)
        if proc.returncode != 0:
            if "lacks the necessary blob" in proc.stderr:
                return MergeResult(Merge.UNAVAILABLE, "the repository lacks the blob the patch was made against")
            conflicted = [line[2:].strip() for line in proc.stderr.splitlines() if line.startswith("U ")]
            if conflicted:
                return MergeResult(Merge.CONFLICTS, ", ".join(conflicted))
            errors = [line.removeprefix("error: ") for line in proc.stderr.splitlines() if line.startswith("error: ")]
            return MergeResult(Merge.UNAVAILABLE, f"git: {errors[0]}" if errors else "git apply --3way failed")
        if all(files.same(scratch / rel, root / rel) for rel in paths):
            return MergeResult(Merge.APPLIED)
        if install:
            files.install_paths(scratch, root, paths)
        return MergeResult(Merge.RESOLVES)


# patch_parse_error's answers by the sha256 of the patch's bytes: a process reads the same series many times
_PARSED: dict[str, str | None] = {}


def patch_parse_error(patch: Path) -> str | None:
    """Why ``patch`` cannot be used as a patch (corrupt, empty, truncated), else None; ``patchtext.cut_short`` too,
    as git silently drops a file whose header was cut short. Asked once per content in a process (``_PARSED``)."""
    try:
        digest = hashlib.sha256(patch.read_bytes()).hexdigest()
    except OSError:
        return _parse_error(patch)  # git says why it cannot read it
    if digest not in _PARSED:
        _PARSED[digest] = _parse_error(patch)
    return _PARSED[digest]


def _parse_error(patch: Path) -> str | None:
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("parse")) as tmp:
        env = isolated_env(GIT_CEILING_DIRECTORIES=str(Path(tmp).parent))
        proc = run_git(["apply", "--numstat", str(patch.resolve())], cwd=Path(tmp), env=env, check=False)
    if proc.returncode != 0:
        lines = [line.removeprefix("error: ") for line in proc.stderr.splitlines() if line.strip()]
        return lines[0] if lines else f"git apply exit status {proc.returncode}"
    read = sum(1 for line in proc.stdout.splitlines() if line.strip())
    return patchtext.cut_short(patch.read_bytes(), read)


@dataclass(frozen=True)
class Failure:
    """Where ``git apply`` said a patch failed: the file, the failing hunk's line (0: none given) and why."""

    path: str
    line: int
    reason: str


_PATCH_FAILED = re.compile(r"^error: patch failed: (?P<path>.+):(?P<line>\d+)$")
_FILE_ERROR = re.compile(r"^error: (?P<path>[^:]+): (?P<reason>.+)$")


def parse_failure(stderr: str) -> Failure | None:
    """The first failing file and hunk line from ``git apply``'s stderr."""
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if match := _PATCH_FAILED.match(line):
            reason = "patch does not apply"
            if i + 1 < len(lines) and (follow := _FILE_ERROR.match(lines[i + 1])):
                reason = follow["reason"]
            return Failure(path=match["path"], line=int(match["line"]), reason=reason)
    for line in lines:
        if (match := _FILE_ERROR.match(line)) and not line.startswith("error: while searching"):
            return Failure(path=match["path"], line=0, reason=match["reason"])
    return None


def am(tree: Path, patch: str, env: Mapping[str, str], options: Sequence[str] = ()) -> str | None:
    """Commit the ``git format-patch`` text ``patch`` in ``tree`` with ``git am``; None when it applied, else git's
    first error line (the half-done ``am`` aborted)."""
    proc = run_git([*NEUTRAL, "am", *AM_OPTIONS, *options], cwd=tree, env=env, check=False, stdin=patch)
    if proc.returncode == 0:
        return None
    lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    reason = next((line for line in lines if line.startswith(("error:", "Patch failed"))), lines[0] if lines else "")
    run_git(["am", "--abort"], cwd=tree, env=env, check=False)
    return reason.removeprefix("error: ") or f"git am exit status {proc.returncode}"


def blob_id(data: bytes) -> str:
    """The id git gives a file of these bytes (``git hash-object``, SHA-1 repositories), computed without git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
