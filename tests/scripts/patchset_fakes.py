"""Helpers for the tooling tests (used by conftest.py and the tests): throwaway git trees that look like
verl 0.8.0 and Trinity-RFT 0.6.0, a fake ``--patches-dir`` (upstreams.toml plus a two-patch verl series and a
one-patch Trinity series, made with ``git format-patch``), and fake sdists of both trees. No network, no real
upstream. Also the fault suite's tools: ``tree_state`` (a digest of everything a command could change in a tree),
the registry's records (``Fault``, ``FaultRecorder``) and ``run_fault``, which runs one bad input and checks the
invariant."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from patchset.cli import main

FORMAT_PATCH = ("format-patch", "--zero-commit", "--full-index", "--no-stat", "--no-signature")

CORE_ALGOS = (
    "".join(f"# line {n}\n" for n in range(1, 11))
    + (
        "def agg_loss(loss_mat, loss_mask, loss_agg_mode):\n"
        '    """Aggregate a loss matrix."""\n'
        "    return loss_mat.sum()\n"
    )
    + "".join(f"# tail {n}\n" for n in range(1, 11))
)

VERL_FILES = {
    "verl/__init__.py": "",
    "verl/version/version": "0.8.0\n",
    "verl/trainer/ppo/core_algos.py": CORE_ALGOS,
    "README.md": "fake verl\n",
}
TRINITY_FILES = {
    "trinity/__init__.py": '# -*- coding: utf-8 -*-\n__version__ = "0.6.0"\n',
    "trinity/trainer/verl/losses.py": "".join(f"# l{n}\n" for n in range(1, 8))
    + "def loss(x):\n    return x\n"
    + "".join(f"# m{n}\n" for n in range(1, 8)),
    "README.md": "fake trinity\n",
}

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"} | {
    f"GIT_{role}_{part}": value
    for role in ("AUTHOR", "COMMITTER")
    for part, value in (("NAME", "Test"), ("EMAIL", "test@example.invalid"))
}

# The second verl patch of the fake series on the real checkouts (conftest's ``fake_series``).
DEPENDENT_PATCH = "0002-trainer-critic-loss-scale-factor-may-be-a-float.patch"  # a line 0001 adds, and README.md
INDEPENDENT_PATCH = "0002-docs-readme-mention-the-patchset.patch"  # touches no file 0001 touches

VERL_PATCH_1 = "0001-trainer-add-scale.patch"
VERL_PATCH_2 = "0002-trainer-fix-scale.patch"
TRINITY_PATCH = "0001-trainer-scale-policy-loss.patch"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def write_files(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def make_repo(root: Path, files: Mapping[str, str]) -> Path:
    root.mkdir(parents=True)
    write_files(root, files)
    git(root, "init", "-q", "--initial-branch=main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "vanilla")
    return root


def tree_digest(root: Path) -> str:
    """sha256 over every file below ``root`` outside .git: path, exec bit and bytes."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if ".git" not in p.relative_to(root).parts):
        if path.is_file() or path.is_symlink():
            rel = path.relative_to(root).as_posix()
            digest.update(f"{rel}\0{os.access(path, os.X_OK)}\0".encode())
            digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
    return digest.hexdigest()


def _commit(repo: Path, subject: str, body: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{subject}\n\n{body}")


def _make_verl_patches(work: Path, dest: Path) -> None:
    repo = make_repo(work, VERL_FILES)
    core = repo / "verl/trainer/ppo/core_algos.py"
    core.write_text(CORE_ALGOS.replace("# line 10\n", "# line 10\ndef scale(x):\n    return x * 1\n"))
    write_files(repo, {"tests/trainer/ppo/test_scale_on_cpu.py": "def test_scale():\n    pass\n"})
    _commit(
        repo,
        "[trainer] feat: add scale",
        "Adds a helper the fix needs.\n\nForwarded: no\nBug: https://example.invalid/1\nLast-Update: 2026-01-01",
    )
    core.write_text(core.read_text().replace("return x * 1", "return x * 2"))
    _commit(repo, "[trainer] fix: scale by two", "Changes lines that the previous patch added.\n\nForwarded: no")
    git(repo, *FORMAT_PATCH, "-2", "-o", str(dest))
    made = sorted(p.name for p in dest.glob("*.patch"))
    (dest / made[0]).rename(dest / VERL_PATCH_1)
    (dest / made[1]).rename(dest / VERL_PATCH_2)


def _make_trinity_patch(work: Path, dest: Path) -> None:
    repo = make_repo(work, TRINITY_FILES)
    losses = repo / "trinity/trainer/verl/losses.py"
    losses.write_text(losses.read_text().replace("    return x\n", "    return x * weight(x)\n"))
    _commit(repo, "[trainer] fix: scale policy loss", "Forwarded: no\nApplied-Upstream: 0.7.0, https://example.invalid")
    git(repo, *FORMAT_PATCH, "-1", "-o", str(dest))
    next(dest.glob("*.patch")).rename(dest / TRINITY_PATCH)


def make_sdist(path: Path, top: str, files: Mapping[str, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        for rel, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, 946684800
            archive.addfile(info, io.BytesIO(data))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class World:
    """One test's world: the fake trees, the fake patches dir, the fake sdists and an empty cache dir."""

    verl: Path
    trinity: Path
    patches: Path
    sdists: dict[str, Path]
    cache: Path

    def args(self, *argv: str) -> list[str]:
        """``apply`` arguments with this world's patches dir and cache."""
        return ["apply", "--patches-dir", str(self.patches), "--cache", str(self.cache), *argv]


def write_upstreams(patches: Path, pins: list[dict[str, object]]) -> None:
    lines = []
    for pin in pins:
        lines.append("[[upstream]]")
        for key, value in pin.items():
            lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else repr(str(value))}")
        lines.append("")
    (patches / "upstreams.toml").write_text("\n".join(lines).replace("'", '"'))


def make_world(tmp_path: Path) -> World:
    """Build a fresh world under ``tmp_path``."""
    patches = tmp_path / "patches"
    _make_verl_patches(tmp_path / "work-verl", patches / "verl")
    _make_trinity_patch(tmp_path / "work-trinity", patches / "trinity")
    (patches / "verl" / "series").write_text(f"# verl series\n{VERL_PATCH_1}\n\n{VERL_PATCH_2}\n")
    (patches / "trinity" / "series").write_text(f"{TRINITY_PATCH}\n")
    sdists = {
        "verl": make_sdist(tmp_path / "sdists" / "verl-0.8.0.tar.gz", "verl-0.8.0", VERL_FILES),
        "trinity-rft": make_sdist(tmp_path / "sdists" / "trinity_rft-0.6.0.tar.gz", "trinity_rft-0.6.0", TRINITY_FILES),
    }
    pin = {"repository": "https://example.invalid/repo"}
    write_upstreams(
        patches,
        [
            {"key": "verl", "name": "verl", "version": "0.8.0", "sdist_sha256": sha256(sdists["verl"]), **pin,
             "tag": "v0.8.0", "series": "verl", "default": True},
            {"key": "verl", "name": "verl", "version": "0.9.0", "sdist_sha256": "0" * 64, **pin,
             "tag": "v0.9.0", "series": "verl", "default": False},
            {"key": "trinity", "name": "trinity-rft", "version": "0.6.0", **pin,
             "sdist_sha256": sha256(sdists["trinity-rft"]), "tag": "v0.6.0", "series": "trinity", "default": True},
            {"key": "trinity", "name": "trinity-rft", "version": "0.7.0", "sdist_sha256": "0" * 64, **pin,
             "tag": "v0.7.0", "series": "trinity", "default": False},
        ],
    )  # fmt: skip
    shutil.rmtree(tmp_path / "work-verl")
    shutil.rmtree(tmp_path / "work-trinity")
    make_repo(tmp_path / "verl", VERL_FILES)
    make_repo(tmp_path / "trinity", TRINITY_FILES)
    return world_at(tmp_path)


def world_at(base: Path) -> World:
    """The world that ``make_world`` built under ``base`` (or a copy of it)."""
    return World(
        verl=base / "verl",
        trinity=base / "trinity",
        patches=base / "patches",
        sdists={"verl": base / "sdists/verl-0.8.0.tar.gz", "trinity-rft": base / "sdists/trinity_rft-0.6.0.tar.gz"},
        cache=base / "cache",
    )


def _git_out(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", "--no-optional-locks", *args], cwd=root, capture_output=True, check=False)
    return f"$ git {' '.join(args)} -> {proc.returncode}\n" + proc.stdout.decode("utf-8", "surrogateescape")


GIT_STATE = (
    ("rev-parse", "HEAD"),
    ("status", "--porcelain=v2", "--untracked-files=all", "--ignored"),
    ("ls-files", "-s"),
    ("branch", "-a", "-v"),
    ("stash", "list"),
    ("for-each-ref",),
)


def tree_state(*roots: Path) -> str:
    """A digest of everything a command could change in the trees at ``roots``: every folder (path, mode), file
    (path, mode, bytes) and symlink (path, target) below each root, tracked, untracked and ignored alike, the
    repository itself (.git, byte for byte: index, refs, objects, config) and git's view of it (HEAD, status
    with untracked and ignored files, the index entries, branches, stashes, every ref). Read-only: git runs with
    --no-optional-locks, so that asking does not refresh the index."""
    digest = hashlib.sha256()
    for root in roots:
        digest.update(f"root {root}\0{root.exists()}\0".encode())
        if not root.exists():
            continue
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            here = Path(folder)
            for name in sorted(dirs + names):
                path = here / name
                rel = path.relative_to(root).as_posix()
                info = path.lstat()
                digest.update(f"{rel}\0{info.st_mode:o}\0".encode())
                if path.is_symlink():
                    digest.update(os.readlink(path).encode())
                elif path.is_file():
                    digest.update(hashlib.sha256(path.read_bytes()).digest())
        if (root / ".git").exists():
            for args in GIT_STATE:
                digest.update(_git_out(root, *args).encode("utf-8", "surrogateescape"))
            index = root / ".git" / "index"
            digest.update(hashlib.sha256(index.read_bytes()).digest() if index.is_file() else b"no index")
    return digest.hexdigest()


# --- the fault registry's records (collected by conftest.py) ----------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One bad input tried: the test, the case, the exit status, whether every tree was left as it was, and the
    error line printed."""

    test: str
    case: str
    code: int
    intact: bool
    message: str = ""

    @property
    def silent_success(self) -> bool:
        return self.code == 0


FAULT_PROPERTY = "patchset-fault"


class FaultRecorder:
    """Records the faults of one test in its report's ``user_properties`` (recorded before any assertion, so that
    a silent success is counted even though its test fails). Reports reach the main process under pytest-xdist
    too, where the session's registry collects them (``pytest_runtest_logreport`` in conftest)."""

    def __init__(self, properties: list[tuple[str, object]], test: str) -> None:
        self._properties = properties
        self._test = test

    def record(self, case: str, code: int, *, intact: bool, message: str = "") -> Fault:
        fault = Fault(self._test, case, code, intact, message)
        self._properties.append((FAULT_PROPERTY, dataclasses.asdict(fault)))
        return fault


@dataclass
class Case:
    """One bad input: the command line, every tree it might touch, the exit code and what the error must name."""

    argv: list[str]
    trees: list[Path]
    code: int
    names: list[str]
    cleanup: list[Callable[[], None]] = field(default_factory=list)


def run_fault(faults: FaultRecorder, capsys: pytest.CaptureFixture[str], case: str, spec: Case) -> str:
    """Run one case in process and check the invariant; returns the error line."""
    before = tree_state(*spec.trees)
    code = main(spec.argv)
    out, err = capsys.readouterr()
    intact = tree_state(*spec.trees) == before
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    faults.record(case, code, intact=intact, message=errors[-1] if errors else err.strip())
    assert code != 0, f"silent success on {case}:\n{out}"
    assert code == spec.code, err
    assert intact, f"{case} changed the tree"
    assert len(errors) == 1 and err.endswith(errors[0] + "\n"), err
    for name in spec.names:
        assert name in errors[0]
    return errors[0]


# --- a patch upstream merged (Applied-Upstream + Upstream-Check), for test_upstream_merged.py ----------------

UPSTREAM_MERGED_PATCH = "0001-trainer-add-scale-upstream-has-it.patch"
UPSTREAM_SINCE = "0.9.0"
# upstream's own form of the change, in place of "# line 8": not this patch's lines, so the patch neither applies
# nor reverts there, but a 3-way merge would resolve (and define scale twice)
UPSTREAM_SCALE = "def scale(x, factor=1):\n    return x * factor\n"
# each recognises the change in this patch's form and in upstream's
UPSTREAM_CHECKS = (
    ("verl/trainer/ppo/core_algos.py", r"^def scale\(x\b"),
    ("verl/trainer/ppo/core_algos.py", r"^    return x \* \w+$"),
)


def verl_files(version: str, *, upstream_fix: bool = False) -> dict[str, str]:
    """The fake verl tree's files at ``version``; ``upstream_fix``: core_algos.py has upstream's form of the
    change (``UPSTREAM_SCALE``)."""
    core = CORE_ALGOS.replace("# line 8\n", UPSTREAM_SCALE) if upstream_fix else CORE_ALGOS
    return VERL_FILES | {"verl/version/version": f"{version}\n", "verl/trainer/ppo/core_algos.py": core}


def make_upstream_merged_patches(
    base: Path, checks: tuple[tuple[str, str], ...] = UPSTREAM_CHECKS, *, since: str | None = UPSTREAM_SINCE
) -> Path:
    """A patches dir at ``base`` whose verl series is one patch (``VERL_PATCH_1``'s change, renamed
    ``UPSTREAM_MERGED_PATCH``) with ``Applied-Upstream: <since>`` (none when ``since`` is None) and one
    ``Upstream-Check: <path>: <regex>`` line per check; ``upstream.toml`` pins verl 0.8.0, 0.9.0 and 0.9.1."""
    work = make_repo(base.parent / f"{base.name}-work", VERL_FILES)
    core = work / "verl/trainer/ppo/core_algos.py"
    core.write_text(CORE_ALGOS.replace("# line 10\n", "# line 10\ndef scale(x):\n    return x * 1\n"))
    write_files(work, {"tests/trainer/ppo/test_scale_on_cpu.py": "def test_scale():\n    pass\n"})
    fields = ["Forwarded: not-needed (merged upstream)", "Bug: https://example.invalid/pr/1"]
    fields += [f"Applied-Upstream: {since}, https://example.invalid/pr/1"] if since else []
    fields += [f"Upstream-Check: {path}: {pattern}" for path, pattern in checks]
    _commit(work, "[trainer] feat: add scale", "Upstream has it since 0.9.0.\n\n" + "\n".join(fields))
    folder = base / "verl"
    folder.mkdir(parents=True)
    (folder / UPSTREAM_MERGED_PATCH).write_text(git(work, *FORMAT_PATCH, "-1", "--stdout"))
    (folder / "series").write_text(f"{UPSTREAM_MERGED_PATCH}\n")
    shutil.rmtree(work)
    pin = {"key": "verl", "name": "verl", "sdist_sha256": "0" * 64, "repository": "https://example.invalid/repo"}
    write_upstreams(
        base,
        [
            pin | {"version": version, "tag": f"v{version}", "series": "verl", "default": version == "0.8.0"}
            for version in ("0.8.0", "0.9.0", "0.9.1")
        ],
    )
    return base


# --- an earlier revision of the fake verl series (the upgrade tests) -----------------------------------------

CORE_AFTER_1 = CORE_ALGOS.replace("# line 10\n", "# line 10\ndef scale(x):\n    return x * 1\n")
EARLIER_CORE = CORE_AFTER_1.replace("return x * 1", "return x * 3")  # what the earlier 0002 wrote


def make_earlier_series(world: World, work: Path) -> Path:
    """An earlier revision of ``world``'s verl series, whose 0002 scaled by three, and ``world.patches/history.json``
    generated from a history of two landings (the earlier series, then today's), as the repository's own manifest
    is. Returns the earlier patches folder (the whole of it: ``--patches-dir``)."""
    from patchset.plumbing.gitops import blob_id
    from patchset.series.history import dumps, generate

    today = (world.patches / "verl" / VERL_PATCH_2).read_text()
    today_blob = blob_id(CORE_AFTER_1.replace("return x * 1", "return x * 2").encode())
    assert today_blob in today, "the fake verl 0002 changed: update make_earlier_series"
    earlier = today.replace("+    return x * 2", "+    return x * 3").replace(
        today_blob, blob_id(EARLIER_CORE.encode())
    )
    repo = work / "history"
    shutil.copytree(world.patches, repo / "patches")
    (repo / "patches" / "verl" / VERL_PATCH_2).write_text(earlier)
    git(repo, "init", "-q")
    _commit(repo, "the earlier series", "Revision 1.")
    shutil.copytree(repo / "patches", work / "earlier-patches")
    (repo / "patches" / "verl" / VERL_PATCH_2).write_text(today)
    _commit(repo, "today's series", "Revision 2.")
    (world.patches / "history.json").write_text(dumps(generate(repo / "patches")))
    return work / "earlier-patches"


def apply_by_hand(tree: Path, patches: Path, *names: str) -> None:
    """``git apply`` each patch of ``patches/verl`` named, as an earlier apply that kept no record left them."""
    for name in names:
        git(tree, "apply", str(patches / "verl" / name))
