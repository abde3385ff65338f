"""Patched wheels: one command builds ``<name>-<release>+patchset.<N>-py3-none-any.whl`` with a readable manifest.

Invariants: the version is ``<release>+patchset.<N>``, a valid PEP 440 version whose local label sorts above the
release (so ``==<release>`` also matches it, and a pin must name the label); N counts the commits touching the
patches folder, ``.dirty`` marks uncommitted changes there; each wheel carries ``<package>/_patchset_manifest.json``
naming every patch (with its sha256), the upstream sdist sha256 and the revision, and reports the labelled version
in its METADATA; installed into a fresh venv the wheels report that version through importlib.metadata, pip show and
the modules' own ``__version__``, and Trinity's verl version check still sees verl >= 0.8 (the test command's wheels
step checks this of the real pinned releases: `wheel_checks.check_wheels`). Exit codes: 0 built, 1 the
build failed, 2 bad input, 3 a patch does not apply; on any failure nothing lands in the dist folder. ``--pin
NAME==VERSION`` builds exactly the pinned releases named, any a series targets, and on a release that has some patches
upstream the manifest records those as skipped (with why: by content, or fixed upstream as its own tests show) and the
others as applied; a companion-only pin, a release
not pinned or a malformed request is refused (exit 2) before anything is fetched, built or written.

The fake world's trees (``patchset_fakes``) are made buildable with a small pyproject.toml each. The real pinned
releases' wheels are built, installed and checked file by file by the test command's wheels step
(``patchset.testcommand.wheel_checks.check_wheels``); its checks are tested here on made-up installs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from patchset_fakes import (
    TRINITY_FILES,
    VERL_FILES,
    VERL_PATCH_1,
    VERL_PATCH_2,
    git,
    make_sdist,
    sha256,
    tree_state,
    write_upstreams,
)

from patchset import cli
from patchset.apply.plan import Action, Behaviour, Step, Verdict
from patchset.plumbing.ui import Console
from patchset.series.model import load_series
from patchset.testcommand import wheel_checks
from patchset.testenv.venv import linked_venv
from patchset.upstreams.pins import load_pins
from patchset.upstreams.workspace import resolve_workspace
from patchset.wheels import build as wheels


def wheels_main(argv: list[str]) -> int:
    """``python -m patchset wheels ARGV``."""
    return cli.main(["wheels", *argv])


REPO_ROOT = Path(__file__).resolve().parents[2]
# read at import: conftest clears PATCHSET_CACHE per test
WORKSPACE = resolve_workspace(None, None, os.environ, REPO_ROOT)
PINS, CACHE = WORKSPACE.pins, WORKSPACE.cache


def _pyproject(name: str, setuptools: str, tool: str) -> str:
    """A fake upstream's pyproject.toml: setuptools, a dynamic version, and ``tool``, how that upstream's own build
    finds its package and version (what decides whether the manifest lands in the wheel)."""
    head = f'[build-system]\nrequires = ["setuptools>={setuptools}"]\nbuild-backend = "setuptools.build_meta"\n\n'
    return head + f'[project]\nname = "{name}"\ndynamic = ["version"]\n\n' + tool


VERL_PYPROJECT = _pyproject(
    "verl",
    "61.0",
    """\
[tool.setuptools]
include-package-data = true

[tool.setuptools.dynamic]
version = {file = "verl/version/version"}

[tool.setuptools.package-dir]
"" = "."

[tool.setuptools.packages.find]
include = ["verl*"]

[tool.setuptools.package-data]
verl = [
  "version/*",
]
""",
)
TRINITY_PYPROJECT = _pyproject(
    "trinity-rft",
    "65",
    """\
[tool.setuptools.packages.find]
where = ["."]
include = ["trinity*"]

[tool.setuptools.dynamic]
version = {attr = "trinity.__version__"}
""",
)


@pytest.fixture
def buildable(world, monkeypatch: pytest.MonkeyPatch):
    """The fake world with sdists that pip can build (a pyproject.toml each) in its cache, pinned in its
    upstreams.toml; wheels built by this interpreter (the test environment)."""
    world.cache.joinpath("sdists").mkdir(parents=True)
    sdists = {
        "verl": make_sdist(
            world.cache / "sdists" / "verl-0.8.0.tar.gz", "verl-0.8.0", {**VERL_FILES, "pyproject.toml": VERL_PYPROJECT}
        ),
        "trinity-rft": make_sdist(
            world.cache / "sdists" / "trinity_rft-0.6.0.tar.gz",
            "trinity_rft-0.6.0",
            {**TRINITY_FILES, "pyproject.toml": TRINITY_PYPROJECT},
        ),
    }
    common = {"repository": "https://example.invalid/repo"}
    write_upstreams(
        world.patches,
        [
            {"key": "verl", "name": "verl", "version": "0.8.0", "sdist_sha256": sha256(sdists["verl"]), **common,
             "tag": "v0.8.0", "series": "verl", "default": True},
            {"key": "trinity", "name": "trinity-rft", "version": "0.6.0", **common,
             "sdist_sha256": sha256(sdists["trinity-rft"]), "tag": "v0.6.0", "series": "trinity", "default": True},
        ],
    )  # fmt: skip
    monkeypatch.setattr(wheels, "ensure_venv", lambda: Path(sys.executable))
    return world


# upstream merged the fake series' first patch in "0.9.1" (as verl did 0001 and 0002 in 0.9.0): its header says so,
# and the fake 0.9.1 tree has the change; the second patch (it changes a line the first adds) applies on top
MERGED_FIELDS = (
    "Applied-Upstream: 0.9.0, https://example.invalid/pr/1\n"
    "Upstream-Check: verl/trainer/ppo/core_algos.py: ^def scale\\(x\\):\n"
)


@pytest.fixture
def partial(buildable):
    """``buildable``, plus a verl 0.9.1 that takes part of the verl series, and a companion-only verl 0.7.1."""
    patch = buildable.patches / "verl" / VERL_PATCH_1
    patch.write_text(
        patch.read_text().replace("Last-Update: 2026-01-01\n", MERGED_FIELDS + "Last-Update: 2026-01-01\n")
    )
    core = VERL_FILES["verl/trainer/ppo/core_algos.py"].replace(
        "# line 10\n", "# line 10\ndef scale(x):\n    return x * 1\n"
    )
    files = {**VERL_FILES, "verl/version/version": "0.9.1\n", "verl/trainer/ppo/core_algos.py": core}
    sdist = make_sdist(
        buildable.cache / "sdists" / "verl-0.9.1.tar.gz", "verl-0.9.1", {**files, "pyproject.toml": VERL_PYPROJECT}
    )
    pins = load_pins(buildable.patches / "upstreams.toml")
    common = {"repository": "https://example.invalid/repo"}
    write_upstreams(
        buildable.patches,
        [
            {"key": "verl", "name": "verl", "version": "0.7.1", "sdist_sha256": "0" * 64, **common, "tag": "v0.7.1",
             "series": "verl", "default": False, "companion_for": "trinity", "target": False},
            *({"key": pin.key, "name": pin.name, "version": pin.version, "sdist_sha256": pin.sdist_sha256, **common,
               "tag": pin.tag, "series": pin.series, "default": pin.default} for pin in pins.pins),
            {"key": "verl", "name": "verl", "version": "0.9.1", "sdist_sha256": sha256(sdist), **common,
             "tag": "v0.9.1", "series": "verl", "default": False},
        ],
    )  # fmt: skip
    return buildable


def _build_args(world, dist: Path, *extra: str) -> list[str]:
    return ["build", "--patches-dir", str(world.patches), "--cache", str(world.cache), "--dist-dir", str(dist), *extra]


def _wheel_version_and_names(wheel: Path) -> tuple[str, set[str]]:
    return wheels._wheel_metadata(wheel)


def _read(wheel: Path, name: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(name).decode()


# --- the label -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("revision, dirty", [(1, False), (3, False), (12, True)])
def test_labelled_version_is_pep440_and_sorts_just_above_the_release(revision: int, dirty: bool):
    label = wheels.Label(revision=revision, dirty=dirty, commit=None)
    version = label.version("0.8.0")

    assert wheels.is_valid_version(version)
    parsed = Version(version)
    assert str(parsed) == version  # already in normal form: the wheel's name and METADATA say exactly this
    assert parsed.local == label.text
    assert Version("0.8.0") < parsed < Version("0.8.1")
    assert not parsed < Version("0.8.0")  # Trinity's is_verl_legacy() compares so
    # why a pin must name the label: ==0.8.0 also matches the patched wheel, ==0.8.0+patchset.N only that one
    assert parsed in SpecifierSet("==0.8.0")
    assert parsed in SpecifierSet(f"=={version}")
    assert Version("0.8.0") not in SpecifierSet(f"=={version}")


@pytest.mark.parametrize("version", ["0.8.0", "0.8.0+", "0.8.0+Patchset.1", "0.8.0+patchset..1", "v0.8.0+patchset.1"])
def test_versions_without_a_normal_local_label_are_refused(version: str):
    assert not wheels.is_valid_version(version)


def _history(root: Path) -> Path:
    root.mkdir()
    git(root, "init", "-q", "--initial-branch=main")
    for index, rel in enumerate(["patches/verl/series", "README.md", "patches/upstreams.toml"]):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{index}\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"change {rel}")
    return root / "patches"


def test_revision_counts_the_commits_that_touch_the_patches_folder(tmp_path: Path):
    patches = _history(tmp_path / "repo")

    label = wheels.patchset_label(patches)

    assert (label.revision, label.dirty, label.text) == (2, False, "patchset.2")
    assert label.commit == git(tmp_path / "repo", "rev-parse", "HEAD").strip()


def test_uncommitted_changes_in_the_patches_folder_mark_the_label_dirty(tmp_path: Path):
    patches = _history(tmp_path / "repo")
    (patches / "verl" / "0002-new.patch").write_text("draft\n")

    assert wheels.patchset_label(patches).text == "patchset.2.dirty"


def test_revision_outside_a_git_history_needs_the_option(tmp_path: Path):
    (tmp_path / "patches").mkdir()

    with pytest.raises(wheels.BadInput, match="--revision N"):
        wheels.patchset_label(tmp_path / "patches")
    assert wheels.patchset_label(tmp_path / "patches", revision=5).text == "patchset.5"


# --- building -----------------------------------------------------------------------------------------------


def test_build_makes_labelled_wheels_with_their_manifest_and_the_same_bytes_when_built_again(
    buildable, tmp_path: Path, capsys
):
    dist = tmp_path / "dist"

    assert wheels_main(_build_args(buildable, dist, "--revision", "7")) == 0

    out = capsys.readouterr().out
    assert "* Building verl 0.8.0+patchset.7 wheel" in out
    assert "* Building trinity-rft 0.6.0+patchset.7 wheel" in out
    names = sorted(p.name for p in dist.iterdir())
    assert names == ["trinity_rft-0.6.0+patchset.7-py3-none-any.whl", "verl-0.8.0+patchset.7-py3-none-any.whl"]
    pins = load_pins(buildable.patches / "upstreams.toml")
    for wheel, pin, package in [(dist / names[1], "verl", "verl"), (dist / names[0], "trinity", "trinity")]:
        version, files = _wheel_version_and_names(wheel)
        pinned = pins.default_for(pin)
        assert version == f"{pinned.version}+patchset.7"
        assert str(wheel) in out
        manifest = json.loads(_read(wheel, f"{package}/_patchset_manifest.json"))
        series = [line for line in (buildable.patches / pin / "series").read_text().splitlines() if line[:1].isdigit()]
        assert manifest["version"] == version
        assert (manifest["patchset"], manifest["revision"], manifest["label"]) == ("patchset", 7, "patchset.7")
        assert manifest["upstream"] == {
            "name": pinned.name,
            "version": pinned.version,
            "sdist_sha256": pinned.sdist_sha256,
            "repository": pinned.repository,
            "tag": pinned.tag,
        }
        assert [p["name"] for p in manifest["patches"]] == series
        for patch in manifest["patches"]:
            assert patch["sha256"] == sha256(buildable.patches / pin / patch["name"])
            assert patch["status"] == "applied"
            assert patch["subject"]
    assert _read(dist / names[1], "verl/version/version").strip() == "0.8.0+patchset.7"
    assert '__version__ = "0.6.0+patchset.7"' in _read(dist / names[0], "trinity/__init__.py")
    # the cached vanilla checkouts are untouched
    for checkout in (buildable.cache / "upstreams").iterdir():
        assert git(checkout, "status", "--porcelain") == ""
    # the same commit built again gives byte-identical wheels (reproducible: a rebuild is the same artifact)
    again = tmp_path / "again"
    assert wheels_main(_build_args(buildable, again, "--revision", "7")) == 0
    assert sorted(p.name for p in again.iterdir()) == names
    for name in names:
        assert (again / name).read_bytes() == (dist / name).read_bytes(), name


def test_a_newer_series_labels_higher_and_its_wheel_replaces_the_older_on_install(buildable, tmp_path: Path):
    """Upgrading a wheel install: the newer series' wheel (a higher +patchset.N) is what pip picks from a folder
    holding both, and installing it replaces the older one (one verl in site-packages, its manifest the newer's)."""
    dists = [tmp_path / "dist-3", tmp_path / "dist-12"]
    for dist, revision in zip(dists, ("3", "12"), strict=True):
        assert wheels_main(_build_args(buildable, dist, "--pin", "verl==0.8.0", "--revision", revision)) == 0
    python, site = linked_venv(Path(sys.executable), tmp_path / "venv")
    pip = [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--disable-pip-version-check"]
    subprocess.run([*pip, *dists[0].glob("*.whl")], check=True, env=wheel_checks._child_env())

    links = [arg for dist in dists for arg in ("--find-links", str(dist))]
    subprocess.run([*pip, "--upgrade", *links, "verl==0.8.0"], check=True, env=wheel_checks._child_env())

    assert [path.name for path in site.glob("verl-*.dist-info")] == ["verl-0.8.0+patchset.12.dist-info"]
    assert json.loads((site / "verl" / wheels.MANIFEST_NAME).read_text())["revision"] == 12
    assert (site / "verl" / "version" / "version").read_text().strip() == "0.8.0+patchset.12"


def test_a_patch_that_does_not_apply_exits_3_and_builds_nothing(buildable, tmp_path: Path, capsys):
    patch = next((buildable.patches / "trinity").glob("0001-*.patch"))
    patch.write_text(patch.read_text().replace("-    return x\n", "-    return y\n"))
    dist = tmp_path / "dist"

    assert wheels_main(_build_args(buildable, dist, "--revision", "7")) == 3

    assert "does not apply" in capsys.readouterr().err
    assert not any(dist.glob("*.whl"))


def test_a_tree_whose_version_is_not_the_pins_exits_2(buildable, tmp_path: Path, capsys):
    sdist = buildable.cache / "sdists" / "verl-0.8.0.tar.gz"
    files = {**VERL_FILES, "verl/version/version": "0.8.1\n", "pyproject.toml": VERL_PYPROJECT}
    make_sdist(sdist, "verl-0.8.0", files)
    text = (buildable.patches / "upstreams.toml").read_text()
    pins = load_pins(buildable.patches / "upstreams.toml")
    (buildable.patches / "upstreams.toml").write_text(
        text.replace(pins.default_for("verl").sdist_sha256, sha256(sdist))
    )

    assert wheels_main(_build_args(buildable, tmp_path / "dist", "--revision", "7")) == 2

    assert "verl/version/version says '0.8.1', not 0.8.0" in capsys.readouterr().err


def test_a_failed_build_exits_1_and_leaves_the_dist_folder_alone(buildable, tmp_path: Path, capsys):
    sdist = buildable.cache / "sdists" / "trinity_rft-0.6.0.tar.gz"
    make_sdist(sdist, "trinity_rft-0.6.0", {**TRINITY_FILES, "pyproject.toml": "[project\n"})
    text = (buildable.patches / "upstreams.toml").read_text()
    pins = load_pins(buildable.patches / "upstreams.toml")
    (buildable.patches / "upstreams.toml").write_text(
        text.replace(pins.default_for("trinity").sdist_sha256, sha256(sdist))
    )
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "other.whl").write_text("kept")

    assert wheels_main(_build_args(buildable, dist, "--revision", "7")) == 1

    assert "pip wheel failed for trinity-rft 0.6.0" in capsys.readouterr().err
    assert sorted(p.name for p in dist.iterdir()) == ["other.whl"]  # the verl wheel built first did not land either


def test_pins_build_exactly_those_releases_and_the_manifest_says_what_each_took(partial, tmp_path: Path, capsys):
    dist = tmp_path / "dist"

    assert (
        wheels_main(_build_args(partial, dist, "--revision", "7", "--pin", "verl==0.8.0", "--pin", "verl==0.9.1")) == 0
    )

    out = capsys.readouterr().out
    assert f"* {VERL_PATCH_1} skipped: in upstream since 0.9.0" in out
    names = sorted(p.name for p in dist.iterdir())
    assert names == ["verl-0.8.0+patchset.7-py3-none-any.whl", "verl-0.9.1+patchset.7-py3-none-any.whl"]  # no trinity
    old, new = (json.loads(_read(dist / name, "verl/_patchset_manifest.json")) for name in names)
    assert old["schema"] == new["schema"] == 3
    assert [p["teeth"] for p in new["patches"]] == [None, None]  # no patch was judged by its tests
    assert new["version"] == _wheel_version_and_names(dist / names[1])[0] == "0.9.1+patchset.7"
    statuses = [(p["name"], p["status"], p["applied_upstream"], p["reason"]) for p in new["patches"]]
    assert statuses == [
        (VERL_PATCH_1, "skipped", "0.9.0", "in upstream since 0.9.0"),
        (VERL_PATCH_2, "applied", None, None),
    ]
    assert new["patches"][0]["upstream_checks"] == ["verl/trainer/ppo/core_algos.py matches /^def scale\\(x\\):/"]
    assert [(p["status"], p["applied_upstream"]) for p in old["patches"]] == [("applied", "0.9.0"), ("applied", None)]
    assert "    return x * 2\n" in _read(dist / names[1], "verl/trainer/ppo/core_algos.py")  # the applied patch is in
    # the test command's check of the statuses agrees, and fails on a manifest that says otherwise
    built = wheels.Built(
        load_pins(partial.patches / "upstreams.toml").find("verl", "0.9.1"), new["version"], dist / names[1], new
    )
    assert wheel_checks.manifest_statuses_match(built, partial.patches) == []
    new["patches"][0]["status"] = "applied"
    assert wheel_checks.manifest_statuses_match(built, partial.patches)


@pytest.mark.parametrize(
    "pin, says",
    [
        (
            "verl==0.7.1",
            "verl 0.7.1 is pinned only to test trinity trees beside it; the verl series does not target it",
        ),
        ("verl==0.9.2", "does not pin that release (buildable: verl==0.8.0, trinity-rft==0.6.0, verl==0.9.1)"),
        ("nosuch==1.0", "does not pin that release"),
        ("verl>=0.8", "expected NAME==VERSION of a pinned release"),
        ("verl==0.8.0+patchset.7", "without a local label (--pin verl==0.8.0)"),
    ],
)
def test_a_pin_that_is_no_series_target_exits_2_before_anything_is_fetched(
    partial, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, pin: str, says: str
):
    monkeypatch.setattr(wheels, "ensure_venv", lambda: pytest.fail("the build environment was asked for"))
    dist = tmp_path / "dist"
    before = tree_state(partial.cache, dist)

    assert wheels_main(_build_args(partial, dist, "--revision", "7", "--pin", "trinity-rft==0.6.0", "--pin", pin)) == 2

    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --pin "), lines  # one line, naming the request
    assert pin in lines[0] and says in lines[0]
    assert tree_state(partial.cache, dist) == before  # nothing fetched, no dist folder


@pytest.mark.parametrize("argv", [["--revision", "0"], ["--revision", "x"], ["--bogus"]])
def test_bad_options_exit_2(buildable, tmp_path: Path, argv: list[str]):
    assert wheels_main(_build_args(buildable, tmp_path / "dist", *argv)) == 2


def test_help_lists_the_exit_codes(capsys):
    assert wheels_main(["--help"]) == 0
    assert wheels_main(["build", "--help"]) == 0

    out = capsys.readouterr().out
    assert "a patch does not apply" in out and "exit status" in out


# --- reading the manifest -----------------------------------------------------------------------------------


def test_manifest_command_reads_the_manifest_without_importing(tmp_path: Path, monkeypatch, capsys):
    package = tmp_path / "site" / "fakepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('imported')\n")
    manifest = {"version": "1.0+patchset.2", "patchset": "patchset", "revision": 2, "commit": None}
    manifest |= {"upstream": {"name": "fakepkg", "version": "1.0", "sdist_sha256": "0" * 64}, "patches": []}
    (package / wheels.MANIFEST_NAME).write_text(json.dumps(manifest))
    (tmp_path / "site" / "plainpkg").mkdir()
    (tmp_path / "site" / "plainpkg" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    assert wheels_main(["manifest", "--json", "fakepkg"]) == 0
    read = json.loads(capsys.readouterr().out)
    assert read["fakepkg"]["manifest"] == manifest
    assert read["fakepkg"]["location"] == str(package)
    assert wheels_main(["manifest", "fakepkg", "plainpkg", "nosuchpkg"]) == 1
    out = capsys.readouterr().out
    assert "fakepkg 1.0+patchset.2 at" in out
    assert "plainpkg at" in out and "no patchset manifest" in out
    assert "nosuchpkg: not importable" in out


def _installed(site: Path, tree: Path, files: list[str]) -> None:
    """``files`` of ``tree`` installed into ``site`` as pip would, with the RECORD that lists them."""
    for relative in files:
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / relative, site / relative)
    info = site / "verl-0.8.0+patchset.3.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "RECORD").write_text("".join(f"{relative},,\n" for relative in files), encoding="utf-8")


def test_every_file_the_applied_patches_change_must_be_installed_yaml_included(tmp_path: Path, monkeypatch):
    tree, site = tmp_path / "patched", tmp_path / "site"
    changed = ["verl/workers/utils/losses.py", "verl/trainer/config/critic/critic.yaml"]
    for relative in [*changed, "verl/__init__.py"]:
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        (tree / relative).write_text(f"# {relative}\n", encoding="utf-8")
    patch = type("Patch", (), {"name": "0001-fix.patch", "files": changed})()
    monkeypatch.setattr(wheel_checks, "load_series", lambda patches_dir, series: type("S", (), {"patches": [patch]}))
    pin = next(pin for pin in load_pins(REPO_ROOT / "patches" / "upstreams.toml").defaults() if pin.key == "verl")
    manifest = {"patches": [{"name": patch.name, "status": "applied"}]}
    built = [wheels.Built(pin, "0.8.0+patchset.3", tmp_path / "verl-0.8.0+patchset.3-py3-none-any.whl", manifest)]

    _installed(site, tree, ["verl/__init__.py", "verl/workers/utils/losses.py"])
    problems = wheel_checks.installed_files_match(site, built, {"verl": tree}, tmp_path, Console(quiet=True))
    assert problems == [
        "verl-0.8.0+patchset.3-py3-none-any.whl does not install verl/trainer/config/critic/critic.yaml as the "
        "patched tree has it"
    ]

    _installed(site, tree, ["verl/__init__.py", *changed])
    assert wheel_checks.installed_files_match(site, built, {"verl": tree}, tmp_path, Console(quiet=True)) == []


@pytest.mark.parametrize(
    ("wheel_name", "version", "sdist", "problem"),
    [
        ("verl-0.8.0+patchset.3-py3-none-any.whl", "0.8.0+patchset.3", None, None),
        ("verl-0.8.0+patchset.2-py3-none-any.whl", "0.8.0+patchset.3", None, "is named"),
        ("verl-0.8.0+patchset.3-py3-none-any.whl", "0.8.0+patchset.2", None, "reports version 0.8.0+patchset.2"),
        ("verl-0.8.0+patchset.3-py3-none-any.whl", "0.8.0+patchset.3", "0" * 64, "names the sdist 000"),
    ],
    ids=["as-labelled", "wrong-name", "wrong-version", "another-sdist"],
)
def test_a_wheel_is_named_versioned_and_sourced_as_its_pin_and_the_patchset_label_say(
    tmp_path: Path, wheel_name, version, sdist, problem
):
    pin = next(pin for pin in load_pins(REPO_ROOT / "patches" / "upstreams.toml").defaults() if pin.key == "verl")
    manifest = {"upstream": {"sdist_sha256": sdist or pin.sdist_sha256}, "patches": []}
    built = wheels.Built(pin, version, tmp_path / wheel_name, manifest)

    problems = wheel_checks.labels_match(built, wheels.Label(3, dirty=False, commit=None))

    assert len(problems) == (problem is not None)
    assert all(problem in text for text in problems)


def test_manifest_records_a_patch_fixed_upstream_by_its_tests():
    pin = load_pins(REPO_ROOT / "patches" / "upstreams.toml").find("verl", "0.9.1")
    patch = load_series(REPO_ROOT / "patches", "verl").patches[2]
    shown = Behaviour(Verdict.FIXED, "geo_mean", passed=19, why="19 passed, 0 failed")
    steps = [Step(patch, 3, Action.SKIP, behaviour=shown)]

    (entry,) = wheels.make_manifest(pin, wheels.Label(7, dirty=False, commit=None), steps)["patches"]

    assert (entry["status"], entry["reason"]) == ("skipped", "fixed upstream (its tests pass on verl 0.9.1 as shipped)")
    assert entry["teeth"] == {"tests": "tests/regression -k 'geo_mean'", "passed": 19}
    assert entry["upstream_checks"] == []
