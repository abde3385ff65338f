"""The test command's check of the patched wheels: build them, install them into a fresh venv, check what they
report and that every installed file is the patched tree's."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from patchset.plumbing import gitops, signals
from patchset.plumbing.errors import PatchsetError
from patchset.plumbing.ui import Console
from patchset.series.model import load_series
from patchset.testcommand.releases import patched_clone
from patchset.testenv.venv import REPO_ROOT, VenvError, ensure_venv, linked_venv
from patchset.upstreams.fetch import ensure_upstream, sha256_of
from patchset.upstreams.pins import Pin, at_least
from patchset.upstreams.registry import UPSTREAMS
from patchset.upstreams.workspace import Workspace
from patchset.wheels.build import MANIFEST_NAME, Built, Label, WheelBuild, build_wheels, patchset_label, wheel_name
from patchset.wheels.selection import requirement

_PIP_INSTALL = ("-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check")


def _child_env() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}


def _run(command: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), capture_output=True, text=True, stdin=subprocess.DEVNULL, **kwargs)


def _pip_show(python: Path, names: Sequence[str]) -> dict[str, dict[str, str]]:
    proc = _run([str(python), "-m", "pip", "show", "--disable-pip-version-check", *names], env=_child_env())
    shown: dict[str, dict[str, str]] = {}
    for block in proc.stdout.split("\n---\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "Name" in fields:
            shown[fields["Name"]] = fields
    return shown


def verify_install(python: Path, site: Path, built: Sequence[Built], console: Console) -> list[str]:
    """Check the wheels installed in the env of ``python``: versions (importlib.metadata, pip show, the version file
    each package reads its ``__version__`` from), the manifests, and, where verl and Trinity are installed together,
    the modules' own ``__version__`` and Trinity's verl version check at runtime; the problems found."""
    problems: list[str] = []
    names = [item.pin.name for item in built]
    code = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    proc = _run([str(python), "-c", code, *names], env=_child_env())
    versions = json.loads(proc.stdout) if proc.returncode == 0 else {}
    shown = _pip_show(python, names)
    for item in built:
        metadata = versions.get(item.pin.name)
        pip_version = shown.get(item.pin.name, {}).get("Version")
        location = shown.get(item.pin.name, {}).get("Location", "")
        console.step(f"{item.pin.name}: importlib.metadata {metadata}, pip show {pip_version} at {location}")
        if metadata != item.version or pip_version != item.version:
            problems.append(f"{item.pin.name} reports {metadata} / {pip_version}, expected {item.version}")
        if not location or Path(location).resolve() != site.resolve():
            problems.append(f"pip show places {item.pin.name} at {location or 'nowhere'}, not {site}")
    proc = _run([str(python), "-m", "patchset", "wheels", "manifest", "--json"], cwd=REPO_ROOT, env=_child_env())
    read = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    for item in built:
        package = UPSTREAMS[item.pin.key].package
        entry = read.get(package) or {}
        if entry.get("manifest") != item.manifest:
            problems.append(f"the manifest read from the installed {package} differs from the one built into it")
        elif not str(entry.get("location", "")).startswith(str(site)):
            problems.append(f"{package} would be imported from {entry.get('location')}, not from {site}")
    for item in built:  # what __version__ reads (importing verl alone would cost seconds of torch for the same file)
        upstream = UPSTREAMS[item.pin.key]
        if (found := upstream.read_version(site)) != item.version:
            problems.append(f"the installed {upstream.version_file} says {found}, expected {item.version}")
    if {item.pin.key for item in built} != {"verl", "trinity"}:
        return problems
    # the modules' own version, and the one runtime check of a version among them (Trinity's, on verl)
    code = (
        "import json, verl, trinity; from trinity.trainer.trainer import is_verl_legacy; "
        "print(json.dumps([verl.__version__, trinity.__version__, is_verl_legacy()]))"
    )
    proc = _run([str(python), "-c", code], cwd=site, env=_child_env())
    if proc.returncode != 0:
        problems.append(f"importing the installed verl and trinity failed:\n{proc.stderr[-2000:]}")
    else:
        verl_version, trinity_version, legacy = json.loads(proc.stdout.strip().splitlines()[-1])
        console.step(f"verl.__version__ {verl_version}, trinity.__version__ {trinity_version}, legacy verl {legacy}")
        wanted = {item.pin.key: item.version for item in built}
        if [verl_version, trinity_version] != [wanted.get("verl"), wanted.get("trinity")] or legacy:
            problems.append(
                f"at runtime verl {verl_version}, trinity {trinity_version}, is_verl_legacy() {legacy}; expected "
                f"{wanted.get('verl')}, {wanted.get('trinity')}, False"
            )
    return problems


def _installed_files(site: Path, distribution: str) -> list[str]:
    """The files pip installed for ``distribution`` into ``site``, from its RECORD (paths relative to ``site``)."""
    prefix = distribution.replace("-", "_")
    records = sorted(site.glob(f"{prefix}-*.dist-info/RECORD"))
    if len(records) != 1:
        raise PatchsetError(f"expected one {prefix}-*.dist-info/RECORD in {site}, found {len(records)}")
    with records[0].open(newline="", encoding="utf-8") as stream:
        return [row[0] for row in csv.reader(stream) if row]


def installed_files_match(
    site: Path, built: Sequence[Built], trees: Mapping[str, Path], patches_dir: Path, console: Console
) -> list[str]:
    """Every file each wheel installed (its RECORD) against the patched tree's file at the same path, by sha256; the
    problems found. The version file (labelled ``+patchset.N``) and the manifest differ by design. Every package file
    that the wheel's applied patches change (modules, and data such as the critic's YAML) must be among those
    compared, so that a wheel built from the wrong tree, or missing a patched file, fails here."""
    problems: list[str] = []
    for item in built:
        upstream, tree = UPSTREAMS[item.pin.key], trees[item.pin.key]
        labelled = {upstream.version_file, f"{upstream.package}/{MANIFEST_NAME}"}
        compared: set[str] = set()
        for relative in _installed_files(site, item.pin.name):
            if ".dist-info/" in relative or relative.startswith("..") or relative in labelled:
                continue
            if "__pycache__/" in relative:
                continue
            if not (tree / relative).is_file():
                problems.append(f"{item.wheel.name} installs {relative}, which the patched tree {tree} does not have")
            elif sha256_of(site / relative) != sha256_of(tree / relative):
                problems.append(f"{item.wheel.name} installs {relative}, which differs from the patched tree's file")
            else:
                compared.add(relative)
        applied = {entry["name"] for entry in item.manifest["patches"] if entry["status"] == "applied"}
        patched = {
            path
            for patch in load_series(patches_dir, item.pin.series).patches
            if patch.name in applied
            for path in patch.files
            if path.startswith(f"{upstream.package}/")
        }
        for path in sorted(patched - compared):
            problems.append(f"{item.wheel.name} does not install {path} as the patched tree has it")
        console.step(
            f"{item.pin.name} {item.pin.version}: {len(compared)} installed files equal the patched tree's (sha256), "
            f"the package files its {len(applied)} applied patches change ({len(patched)}) among them; only the "
            f"version file and manifest differ"
        )
    return problems


def labels_match(item: Built, label: Label) -> list[str]:
    """The wheel's file name and version are its pin's release with the patchset's ``label``, and its manifest names
    the pin's sdist (by sha256) as what it was built from. The problems found."""
    version = label.version(item.pin.version)
    name = wheel_name(item.pin, version)
    problems = []
    if item.wheel.name != name:
        problems.append(f"the wheel of {item.pin.label} is named {item.wheel.name}, not {name}")
    if item.version != version:
        problems.append(f"the wheel {item.wheel.name} reports version {item.version}, not {version}")
    if (sdist := item.manifest.get("upstream", {}).get("sdist_sha256")) != item.pin.sdist_sha256:
        problems.append(f"{item.wheel.name}'s manifest names the sdist {sdist}, not {item.pin.label}'s")
    return problems


def manifest_statuses_match(item: Built, patches_dir: Path) -> list[str]:
    """The wheel's manifest against what each patch's header says of the release: a patch whose ``Applied-Upstream``
    version is at or before the release is ``skipped`` (``in upstream since <version>``), every other one
    ``applied``; the series in its order. The problems found."""
    expected = []
    for patch in load_series(patches_dir, item.pin.series).patches:
        upstream = patch.upstream_since is not None and at_least(item.pin.version, patch.upstream_since)
        reason = f"in upstream since {patch.upstream_since}" if upstream else None
        expected.append((patch.name, "skipped" if upstream else "applied", reason))
    recorded = [(entry["name"], entry["status"], entry["reason"]) for entry in item.manifest["patches"]]
    if recorded == expected:
        return []
    return [f"{item.wheel.name}'s manifest records {recorded}; the patch headers say {expected}"]


def _check_alone(work: Path, base_python: Path, item: Built, workspace: Workspace, console: Console) -> list[str]:
    """The wheel of a release installed alone in a fresh venv (pip cannot install trinity-rft 0.6.0 beside verl
    0.9.x): versions and manifest as labelled, each patch's status as its header says, every file a patched clone's."""
    (work / "patched").mkdir(exist_ok=True)
    vanilla = ensure_upstream(item.pin, workspace.cache, console)  # the pinned trees step fetched it: only read here
    tree = work / "patched" / item.pin.dirname
    patched_clone(vanilla, tree, workspace, _child_env())
    python, site = linked_venv(base_python, work / f"venv-{item.pin.dirname}")
    console.step(f"Installing {item.wheel.name} alone into a fresh venv {site.parents[2]}")
    # --no-compile: nothing is imported from this venv, and byte-compiling 500 files is half of pip's time here
    proc = _run([str(python), *_PIP_INSTALL, "--quiet", "--no-compile", str(item.wheel)], env=_child_env())
    if proc.returncode != 0:
        return [f"pip install of {item.wheel.name} failed:\n{proc.stderr[-3000:]}"]
    problems = verify_install(python, site, [item], console)
    problems += manifest_statuses_match(item, workspace.patches_dir)
    statuses = ", ".join(f"{entry['name'][:4]} {entry['status']}" for entry in item.manifest["patches"])
    console.step(f"{item.pin.name} {item.version}: manifest {statuses}")
    return problems + installed_files_match(site, [item], {item.pin.key: tree}, workspace.patches_dir, console)


def check_wheels(console: Console, patched: Mapping[str, Path], workspace: Workspace, also: Sequence[Pin] = ()) -> bool:
    """Build the wheels, install them (``pip install --no-deps``) into a fresh `linked_venv`, and check what they
    report and that every installed file is the patched tree's; ``also``: more pinned releases, each installed alone
    and checked against a patched clone (`_check_alone`). No test runs here: the fix step tests the same files."""
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="patchset-wheel-check-") as tmp, signals.handled() as guard:
            work, base_python = Path(tmp), ensure_venv()
            requested = [requirement(pin) for pin in (*workspace.pins.defaults(), *also)]
            build = WheelBuild(work / "dist", requested=requested, python=base_python)
            built_all = build_wheels(build, workspace, console, guard)
            built = [item for item in built_all if item.pin.default]
            label = patchset_label(workspace.patches_dir)
            problems = [problem for item in built_all for problem in labels_match(item, label)]
            for item in built_all:
                if not item.pin.default:
                    problems += _check_alone(work, base_python, item, workspace, console)
            python, site = linked_venv(base_python, work / "venv")
            console.step(f"Installing {', '.join(item.wheel.name for item in built)} into a fresh venv {work / 'venv'}")
            if (spec := _run([str(python), "-c", "import verl"], env=_child_env())).returncode == 0:
                raise PatchsetError(f"the fresh venv already imports verl before the install:\n{spec.stdout}")
            wheels = [str(item.wheel) for item in built]
            proc = _run([str(python), *_PIP_INSTALL, "--quiet", *wheels], env=_child_env())
            if proc.returncode != 0:
                raise PatchsetError(f"pip install of the wheels failed:\n{proc.stderr[-3000:]}")
            problems += verify_install(python, site, built, console)
            problems += installed_files_match(site, built, patched, workspace.patches_dir, console)
            for problem in problems:
                print(f"error: {problem}", file=sys.stderr)
            ok = not problems
    except (PatchsetError, gitops.GitError, VenvError, subprocess.CalledProcessError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        ok = False
    console.summary(f"Wheel check {'passed' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s")
    return ok
