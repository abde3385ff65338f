"""The overlays' one source is the patch: a module derived from a patch file is the file ``git apply`` makes, its
changes are made on the live module in place (identity kept, exact undo), and the guard and the cache trust nothing
they did not check.

Pinned on a small package made here (``pkg``, release 1.0) with a two-patch series, so no upstream is needed; the
overlay tests (tests/overlay) do the same on the pinned verl and Trinity releases.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from patchset_overlay import derive
from patchset_overlay.changes import Parsed, UnsupportedChange, module_changes
from patchset_overlay.derive import Plan
from patchset_overlay.guard import judge
from patchset_overlay.hunks import HunkError, apply_hunks
from patchset_overlay.install import apply_change
from patchset_overlay.spec import Overlay, Piece, PieceState, UpstreamSource

MODULE = '''import dataclasses
import functools

SCALE = 2


def loss(x, mode="mean"):
    """Upstream's."""
    return x * SCALE


def wraps_it(func):
    @functools.wraps(func)
    def inner(*args, **kwargs):
        return func(*args, **kwargs)

    return inner


class Base:
    def hello(self):
        return "base"


class Worker(Base):
    kind = "upstream"

    @wraps_it
    def run(self, x):
        return loss(x)


@dataclasses.dataclass
class Config:
    mode: str = "mean"
    clip: float = 0.5
'''
FIRST = (
    MODULE.replace("    return x * SCALE\n", "    return x * SCALE / count(x)\n")
    .replace("class Base:", "def count(x):\n    return 2\n\n\nclass Base:")
    .replace('    mode: str = "mean"\n', '    mode: str = "mean"\n    scale: int = 1\n')
)
SECOND = (
    FIRST.replace('    kind = "upstream"\n', '    kind = "patched"\n')
    .replace("/ count(x)\n", "/ count(x) + 0\n")
    .replace(
        "        return loss(x)\n",
        '        return loss(x) + 1\n\n    def hello(self):\n        return super().hello() + " and worker"\n',
    )
)


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The release (``site/pkg``), a series of two patches made by git, pins, and an overlay of it."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    (repo / "pkg" / "__init__.py").write_text('__version__ = "1.0"\n')
    series = tmp_path / "patches" / "pkg"
    series.mkdir(parents=True)
    for number, (text, subject) in enumerate([(MODULE, "release"), (FIRST, "count"), (SECOND, "worker")]):
        (repo / "pkg" / "mod.py").write_text(text)
        _git(repo, "add", ".")
        _git(repo, "commit", "-qm", subject)
        if number:
            patch = _git(repo, "format-patch", "-1", "--stdout", "--zero-commit", "--full-index")
            header = "Applied-Upstream: 2.0, https://example.invalid\n" if number == 1 else ""
            (series / f"000{number}-{subject}-fix.patch").write_text(patch.replace("\n\n", f"\n\n{header}", 1))
    (series / "series").write_text("0001-count-fix.patch\n0002-worker-fix.patch  # the second\n")
    (tmp_path / "patches" / "upstreams.toml").write_text(
        '[[upstream]]\nname = "pkg"\nversion = "1.0"\nseries = "pkg"\noverlay = true\n'
    )
    site = tmp_path / "site"
    _git(repo, "checkout", "-q", "HEAD~2")
    (site / "pkg").mkdir(parents=True)
    for name in ("__init__.py", "mod.py"):
        (site / "pkg" / name).write_text((repo / "pkg" / name).read_text())
    monkeypatch.setattr("patchset_overlay.derive.patches_root", lambda: tmp_path / "patches")
    monkeypatch.setenv(derive.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(site))
    overlay = Overlay(
        "pkg_overlay", "pkg", "pkg", ("pkg.mod",), (Piece("count", ("count-fix",)), Piece("worker", ("worker-fix",)))
    )
    yield overlay, site, repo
    for name in ("pkg", "pkg.mod"):
        sys.modules.pop(name, None)


def _plan(overlay: Overlay, site: Path) -> Plan:
    return Plan.make(overlay, UpstreamSource("pkg", site / "pkg"))


def test_derived_text_is_what_git_apply_makes_and_reverses(world):
    overlay, site, repo = world
    plan = _plan(overlay, site)
    assert plan.derive(list(overlay.pieces)) == {}
    _git(repo, "checkout", "-q", "-")
    assert plan.derived["pkg/mod.py"].text == (repo / "pkg" / "mod.py").read_text() == SECOND
    hunks = [hunk for patch in plan.patches for hunk in patch.files["pkg/mod.py"]]
    assert (
        apply_hunks(
            apply_hunks(SECOND, plan.patches[1].files["pkg/mod.py"], reverse=True),
            plan.patches[0].files["pkg/mod.py"],
            reverse=True,
        )
        == MODULE
    )
    with pytest.raises(HunkError, match="hunk 1"):
        apply_hunks("nothing alike\n", hunks[:1], where="pkg/mod.py")


def test_each_patch_is_read_as_the_objects_it_changes(world):
    overlay, site, _ = world
    plan = _plan(overlay, site)
    plan.derive(list(overlay.pieces))
    changes = plan.derived["pkg/mod.py"].changes
    assert sorted(c.label for c in changes["count-fix"]) == ["Config.scale", "count", "loss"]
    assert sorted(c.label for c in changes["worker-fix"]) == ["Worker.hello", "Worker.kind", "Worker.run", "loss"]
    with pytest.raises(UnsupportedChange, match="bases changed"):
        module_changes(Parsed("class A(B):\n    pass\n"), Parsed("class A(C):\n    pass\n"))


def test_changes_are_made_in_place_and_undone_exactly(world):
    overlay, site, _ = world
    plan = _plan(overlay, site)
    plan.derive(list(overlay.pieces))
    module = importlib.import_module("pkg.mod")
    loss, run, worker = module.loss, module.Worker.run, module.Worker()
    bound = functools.partial(module.loss, 4)
    derived = plan.derived["pkg/mod.py"]
    undo = [
        apply_change(module, derived, change)
        for piece in overlay.pieces
        for change in plan.piece_changes(piece, "pkg.mod")
    ]
    assert module.loss is loss and bound() == 4.0 and loss.__doc__ == "Upstream's."
    assert module.Worker.run is run and worker.run(2) == 3.0 and worker.kind == "patched"
    assert worker.hello() == "base and worker" and module.Config().scale == 1
    assert loss.__code__.co_filename == derived.filename and derived.filename.startswith(str(site.parent / "cache"))
    for step in reversed(undo):
        step()
    assert bound() == 8 and worker.run(2) == 4 and worker.kind == "upstream" and worker.hello() == "base"
    assert not hasattr(module, "count") and [f.name for f in dataclasses.fields(module.Config)] == ["mode", "clip"]


def test_guard_reads_the_release_and_its_files(world):
    overlay, site, _ = world
    plan = _plan(overlay, site)
    recorded = {"pkg/mod.py": __import__("hashlib").sha256(MODULE.encode()).hexdigest()}
    count, worker = overlay.pieces
    assert judge(plan, count, recorded).state is PieceState.ACTIVE
    assert judge(plan, worker, {}).state is PieceState.REFUSED  # no release recorded: not supported
    (site / "pkg" / "mod.py").write_text(MODULE.replace("SCALE = 2", "SCALE = 3"))
    verdict = judge(plan, worker, recorded)
    assert verdict.state is PieceState.REFUSED and "pkg/mod.py in pkg 1.0 is not the file" in verdict.reason
    (site / "pkg" / "mod.py").write_text(SECOND)  # a patched tree: the patches come off it to the recorded file
    assert judge(plan, worker, recorded).state is PieceState.UPSTREAM_HAS_FIX
    (site / "pkg" / "__init__.py").write_text('__version__ = "2.0"\n')  # 0001 is upstream in 2.0
    verdict = judge(_plan(overlay, site), count, recorded)
    assert verdict.state is PieceState.UPSTREAM_HAS_FIX and "upstream since 2.0" in verdict.reason


def test_a_piece_whose_patch_builds_on_a_piece_left_out_is_refused_with_the_reason(world):
    overlay, site, _ = world
    plan = _plan(overlay, site)
    failed = plan.derive([overlay.pieces[1]])  # 0002 changes a line 0001 writes
    assert "0002-worker-fix.patch cannot be derived" in failed["worker"] and "(it may build on 0001" in failed["worker"]


def test_a_tampered_cache_entry_is_written_again_and_an_unsafe_cache_is_not_used(world, tmp_path):
    overlay, site, _ = world
    plan = _plan(overlay, site)
    plan.derive(list(overlay.pieces))
    copy = Path(plan.derived["pkg/mod.py"].filename)
    assert copy.read_text() == SECOND and oct(copy.parent.parent.parent.stat().st_mode)[-3:] == "700"
    copy.write_text("import os  # not what the patch gives\n")
    plan.derive(list(overlay.pieces))
    assert Path(plan.derived["pkg/mod.py"].filename).read_text() == SECOND
    (tmp_path / "cache").chmod(0o777)
    assert derive.cache_root() is None
    plan.derive(list(overlay.pieces))
    assert plan.derived["pkg/mod.py"].filename == "<patchset_overlay pkg/mod.py>"
