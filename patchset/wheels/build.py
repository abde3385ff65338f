"""Patched wheels of the pinned releases, and their manifest. The version ``<release>+patchset.<N>`` sorts just above
its release, so ordered version checks keep working; N counts the commits that touch ``patches/``, so the same N means
the same patches on the same sdists."""

from __future__ import annotations

import dataclasses
import email.parser
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.apply.job import ApplyOptions, apply_series
from patchset.apply.plan import Action, Step
from patchset.apply.target import target_for_pin
from patchset.plumbing import gitops, signals, tempdirs
from patchset.plumbing.errors import EXIT_OK, BadInput, PatchsetError
from patchset.plumbing.ui import Console, display_path
from patchset.testenv.venv import VenvError, ensure_venv
from patchset.upstreams.fetch import ensure_upstream, sha256_of
from patchset.upstreams.pins import Pin
from patchset.upstreams.registry import UPSTREAMS
from patchset.upstreams.workspace import Workspace
from patchset.wheels.selection import select_pins

PATCHSET_NAME = "patchset"
PATCHSET_TITLE = "verl / Trinity-RFT loss-scaling patchset"
MANIFEST_NAME = "_patchset_manifest.json"
# 2 added each patch's applied_upstream, reason and upstream_checks; 3 its teeth (null unless fixed upstream)
MANIFEST_SCHEMA = 3
EXIT_BUILD_FAILED = 1

# PEP 440: a local version label is alphanumeric segments separated by dots (lower case in normal form).
_LOCAL_LABEL = re.compile(r"^[a-z0-9]+(?:\.[a-z0-9]+)*$")
_RELEASE = re.compile(r"^\d+(?:\.\d+)*$")

# import package -> PyPI name, of the packages ``wheels manifest`` reads by default
DISTRIBUTIONS = {upstream.package: upstream.distribution for upstream in UPSTREAMS.values()}


@dataclass(frozen=True)
class Label:
    """The local version label ``patchset.<revision>[.dirty]`` and where it came from."""

    revision: int
    dirty: bool
    commit: str | None

    @property
    def text(self) -> str:
        return f"{PATCHSET_NAME}.{self.revision}" + (".dirty" if self.dirty else "")

    def version(self, release: str) -> str:
        return f"{release}+{self.text}"


@dataclass(frozen=True)
class WheelBuild:
    """The pinned releases ``requested`` (none: the default pins); ``python``, ``revision``: None for the defaults."""

    dist_dir: Path
    requested: Sequence[str] = ()
    revision: int | None = None
    python: Path | None = None


@dataclass(frozen=True)
class Built:
    """One wheel built and checked."""

    pin: Pin
    version: str
    wheel: Path
    manifest: dict[str, Any]


def is_valid_version(version: str) -> bool:
    """True for ``<release>+<local label>`` as PEP 440 spells it in normal form (``0.8.0+patchset.2``)."""
    release, plus, local = version.partition("+")
    return bool(_RELEASE.match(release)) and bool(plus) and bool(_LOCAL_LABEL.match(local))


def patchset_label(patches_dir: Path, revision: int | None = None) -> Label:
    """The label of ``patches_dir``, counted in the history that holds it; ``revision`` overrides the count."""
    commit = gitops.head_commit(patches_dir)
    status = gitops.git_value(patches_dir, "status", "--porcelain", "--untracked-files=all", "--", ".")
    dirty = commit is not None and status is not None
    if revision is not None:
        if revision < 1:
            raise BadInput(f"--revision must be a positive integer, not {revision}")
        return Label(revision=revision, dirty=dirty, commit=commit)
    if commit is None:
        raise BadInput(
            f"{patches_dir} is not in a git checkout with history, so the patchset revision (the number of commits "
            f"that touch it) cannot be counted; pass --revision N"
        )
    if gitops.git_value(patches_dir, "rev-parse", "--is-shallow-repository") == "true":
        raise BadInput(
            f"{patches_dir} is in a shallow clone, so counting the commits that touch it would give a wrong "
            f"revision; fetch the full history (git fetch --unshallow) or pass --revision N"
        )
    count = gitops.git_value(patches_dir, "rev-list", "--count", "HEAD", "--", ".")
    if count is None or not count.isdigit() or int(count) < 1:
        raise BadInput(f"no commit touches {patches_dir}, so it has no patchset revision; pass --revision N")
    return Label(revision=int(count), dirty=dirty, commit=commit)


def _patch_entry(step: Step, label: str) -> dict[str, Any]:
    """One patch of the manifest: what it is, and what the build did with it and why."""
    status = {Action.CHANGE: "applied", Action.SKIP: "skipped", Action.NOTHING: "already applied"}
    state = step.upstream if step.action is Action.SKIP else None
    reason = None
    if state is not None:
        reason = f"in upstream since {state.since}" if state.claimed else "already upstream (content)"
    teeth = None
    if step.fixed_upstream and step.behaviour is not None:
        reason = f"fixed upstream (its tests pass on {label} as shipped)"
        teeth = {"tests": f"tests/regression -k {step.behaviour.selection!r}", "passed": step.behaviour.passed}
    return {
        "name": step.patch.name,
        "subject": step.patch.subject,
        "sha256": sha256_of(step.patch.path),
        "status": status.get(step.action, step.action.value),
        "applied_upstream": step.patch.upstream_since,
        "reason": reason,
        "upstream_checks": [str(check) for check in state.matched] if state is not None else [],
        "teeth": teeth,
    }


def make_manifest(pin: Pin, label: Label, steps: Sequence[Step]) -> dict[str, Any]:
    """The manifest of the wheel of ``pin``: the patchset, the upstream and every patch of the plan's ``steps``."""
    return {
        "schema": MANIFEST_SCHEMA,
        "patchset": PATCHSET_NAME,
        "title": PATCHSET_TITLE,
        "revision": label.revision,
        "label": label.text,
        "dirty": label.dirty,
        "commit": label.commit,
        "version": label.version(pin.version),
        "upstream": {field: getattr(pin, field) for field in ("name", "version", "sdist_sha256", "repository", "tag")},
        "series": pin.series,
        "patches": [_patch_entry(step, pin.label) for step in steps],
    }


def _prepare_tree(pin: Pin, tree: Path, label: Label, manifest: dict[str, Any]) -> None:
    """Set the labelled version and add the manifest in the build copy ``tree``."""
    upstream = UPSTREAMS[pin.key]
    found = upstream.read_version(tree)
    if found != pin.version:
        raise BadInput(
            f"{pin.label}: {upstream.version_file} says {found or 'nothing'!r}, not {pin.version}; the tree is not "
            f"the pinned release, so its version is left alone and no wheel is built"
        )
    upstream.write_version(tree, label.version(pin.version))
    manifest_rel = f"{upstream.package}/{MANIFEST_NAME}"
    (tree / manifest_rel).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    # setuptools ships it from MANIFEST.in, and from the package data where the build ignores MANIFEST.in
    manifest_in = tree / "MANIFEST.in"
    before = manifest_in.read_text(encoding="utf-8") if manifest_in.exists() else ""
    manifest_in.write_text(before + ("" if before.endswith("\n") or not before else "\n") + f"include {manifest_rel}\n")
    if upstream.package_data is not None:
        rel, anchor = upstream.package_data
        path = tree / rel
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if text.count(anchor) != 1:
            raise BadInput(
                f"{pin.label}: {rel} does not hold {anchor!r} exactly once, so the manifest cannot be added to its "
                f"package data; the wheel recipe in patchset/wheels/build.py needs updating for this release"
            )
        path.write_text(text.replace(anchor, f"{anchor}  {json.dumps(MANIFEST_NAME)},\n"), encoding="utf-8")
    # build as from the sdist: setuptools then lists files from the sdist's SOURCES.txt, never from git
    shutil.rmtree(tree / ".git")


def _wheel_metadata(wheel: Path) -> tuple[str, set[str]]:
    """The ``Version`` of the wheel's METADATA and the names it holds."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next((n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        if metadata is None:
            return "", names
        headers = email.parser.BytesHeaderParser().parsebytes(archive.read(metadata))
        return str(headers.get("Version", "")), names


def wheel_name(pin: Pin, version: str) -> str:
    """The file name of ``pin``'s wheel labelled ``version``."""
    return f"{pin.name.replace('-', '_')}-{version}-py3-none-any.whl"


def _check_wheel(pin: Pin, wheel: Path, version: str) -> str | None:
    """What is wrong with the wheel just built, or None."""
    expected = wheel_name(pin, version)
    if wheel.name != expected:
        return f"pip built {wheel.name}, expected {expected}"
    got, names = _wheel_metadata(wheel)
    if got != version:
        return f"{wheel.name} says Version: {got or 'nothing'} in its METADATA, expected {version}"
    package = UPSTREAMS[pin.key].package
    for rel in (f"{package}/{MANIFEST_NAME}", UPSTREAMS[pin.key].version_file):
        if rel not in names:
            return f"{wheel.name} lacks {rel}"
    return None


def _build_env(label: Label, patches_dir: Path) -> dict[str, str]:
    """pip's environment: no user config, and zip timestamps from the patchset commit (reproducible wheels)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PIP_CONFIG_FILE"] = os.devnull
    if "SOURCE_DATE_EPOCH" not in env:
        stamp = gitops.git_value(patches_dir, "log", "-1", "--format=%ct") if label.commit else None
        env["SOURCE_DATE_EPOCH"] = stamp if stamp and stamp.isdigit() else "315532800"
    return env


class BuildFailed(PatchsetError):
    """pip could not build a wheel, or the wheel it built is not the one expected."""

    exit_code = EXIT_BUILD_FAILED


def build_wheels(build: WheelBuild, workspace: Workspace, console: Console, guard: signals.Guard) -> list[Built]:
    """Build the wheels ``build`` asks for from ``workspace``; all or none of them land in its ``dist_dir``."""
    patches_dir, dist_dir, python = workspace.patches_dir, build.dist_dir, build.python
    targets = select_pins(workspace.pins, build.requested)
    if unknown := [pin.label for pin in targets if pin.key not in UPSTREAMS]:
        raise BadInput(f"no wheel recipe for {', '.join(unknown)} (known: {', '.join(UPSTREAMS)})")
    label = patchset_label(patches_dir, build.revision)
    for pin in targets:
        if not is_valid_version(label.version(pin.version)):
            raise BadInput(f"{label.version(pin.version)} is not a PEP 440 version with a local label")
    if label.dirty:
        console.warn(f"{display_path(patches_dir)} has uncommitted changes: the wheels are labelled {label.text}")
    if python is None:
        try:
            python = ensure_venv()  # builds the test environment on first use
        except VenvError as exc:  # the build environment could not be made: no wheel, exit 1
            raise BuildFailed(str(exc)) from exc
    env = _build_env(label, patches_dir)
    dist_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=tempdirs.prefix("wheels")))
    try:
        staged: list[Built] = []
        for pin in targets:
            version = label.version(pin.version)
            vanilla = ensure_upstream(pin, workspace.cache, console)
            tree = work / pin.dirname
            gitops.clone_local(vanilla, tree)
            console.step(f"Applying the {pin.series} series to a fresh clone of {pin.label}")
            target = target_for_pin(pin, tree, workspace.patches_dir)
            line = f"python -m patchset wheels (building {pin.label})"  # applied as apply does, with no regression run
            applied = apply_series(
                [target], workspace, ApplyOptions(), console=console, guard=guard, command_line=line, regression=False
            )
            steps = applied.plans[0].steps
            manifest = make_manifest(pin, label, steps)
            if not any(step.action is Action.CHANGE for step in steps):
                console.warn(
                    f"{pin.label} has every patch of the {pin.series} series already; its wheel is the release with "
                    f"the label and the manifest only"
                )
            _prepare_tree(pin, tree, label, manifest)
            console.step(f"Building {pin.name} {version} wheel")
            out = work / f"wheel-{pin.dirname}"
            started = time.monotonic()
            command = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
            command += ["--disable-pip-version-check", "--quiet", "-w", str(out), str(tree)]
            proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                tail = "\n".join((proc.stderr + proc.stdout).strip().splitlines()[-20:])
                raise BuildFailed(f"pip wheel failed for {pin.label} (exit status {proc.returncode}):\n{tail}")
            wheels = sorted(out.glob("*.whl"))
            if len(wheels) != 1:
                raise BuildFailed(f"pip wheel left {len(wheels)} wheels for {pin.label} in {out}, expected one")
            if (problem := _check_wheel(pin, wheels[0], version)) is not None:
                raise BuildFailed(f"{pin.label}: {problem}; nothing was put into {display_path(dist_dir)}")
            console.step(f"Built {wheels[0].name} in {time.monotonic() - started:.0f} s")
            staged.append(Built(pin=pin, version=version, wheel=wheels[0], manifest=manifest))
        for item in staged:
            shutil.move(item.wheel, dist_dir / item.wheel.name)
        return [dataclasses.replace(item, wheel=dist_dir / item.wheel.name) for item in staged]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def read_manifest(package: str) -> tuple[Path | None, dict[str, Any] | None]:
    """Where ``import package`` would load it from and its manifest (None: none), without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None, None
    folder = Path(next(iter(spec.submodule_search_locations)))
    path = folder / MANIFEST_NAME
    return folder, json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def report_manifests(packages: Sequence[str], console: Console, *, as_json: bool = False) -> int:
    """Print the manifest of each installed one of ``packages``; 1 when one has none, else 0."""
    found: dict[str, Any] = {}
    for package in packages:
        folder, manifest = read_manifest(package)
        try:
            version = importlib.metadata.version(DISTRIBUTIONS.get(package, package))
        except importlib.metadata.PackageNotFoundError:
            version = None
        found[package] = {
            "location": str(folder) if folder else None,
            "distribution_version": version,
            "manifest": manifest,
        }
        if as_json:
            continue
        if folder is None:
            console.summary(f"{package}: not importable")
        elif manifest is None:
            console.summary(f"{package} at {folder}: no patchset manifest (not a patched wheel)")
        else:
            upstream = manifest["upstream"]
            console.summary(
                f"{package} {manifest['version']} at {folder}: {manifest['patchset']} revision {manifest['revision']} "
                f"(commit {manifest['commit'] or 'unknown'}) on {upstream['name']} {upstream['version']} "
                f"(sdist sha256 {upstream['sdist_sha256']})"
            )
            for patch in manifest["patches"]:
                why = f": {patch['reason']}" if patch.get("reason") else ""  # schema 1 has no reason
                console.summary(f"  {patch['name']} ({patch['status']}{why}) sha256 {patch['sha256']}")
    if as_json:
        print(json.dumps(found, indent=2))
    return 1 if any(entry["manifest"] is None for entry in found.values()) else EXIT_OK
