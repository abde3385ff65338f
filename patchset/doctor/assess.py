"""Which split-dependent losses a composed run uses (those whose ``uses.when`` settings in ``parts.toml`` all hold),
what the split does to each, and whether the fix acts here (a patched tree or wheel, recognised by content; the
overlay; upstream), and not where ``uses.not_fixed_when`` holds (KL-Cov on the Megatron engine, say)."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.apply.plan import Action, plan_series
from patchset.doctor.compose import ENTRY_POINTS, SFT_CONFIG, Shape, get, package_root, shape
from patchset.plumbing import patchtext, tempdirs
from patchset.plumbing.errors import BadInput
from patchset.series.model import Patch, load_series, read_patch
from patchset.series.parts import read_parts, slug_of
from patchset.upstreams.pins import Pins, at_least
from patchset.upstreams.registry import UPSTREAMS

ACTOR, CRITIC = "actor_rollout_ref.actor", "critic"


@dataclass(frozen=True)
class Row:
    model: str  # what trains with it: the actor ("actor_rollout_ref.actor") or the critic
    loss: str
    patch: str  # the series' patch file that fixes it ("" for a loss that needs none)
    effect: str  # what the split does to it at these settings
    fix: str  # how the fix acts here, or why it does not
    affected: bool  # on this release, at these settings, the split changes this loss
    uncovered: bool  # and here it still does: no fix acts


def holds(config: dict[str, Any], setting: str) -> bool:
    """Whether ``key=value`` (or ``key=a|b``) holds on ``config`` (booleans as ``true``/``false``); a missing key
    never holds."""
    key, _, values = setting.partition("=")
    found = get(config, key, None)
    return found is not None and str(found).lower() in values.lower().split("|")


@dataclass(frozen=True)
class Upstream:
    """One upstream the run imports: its names, the folder above its package, its release, the series that targets that
    release (verl 0.7.1: verl-0.7) and the default pin's series, which declares each loss's ``uses`` once."""

    package: str
    distribution: str
    root: Path
    version: str
    series: str
    default_series: str


def imported(key: str, pins: Pins) -> Upstream:
    """The release of ``key`` this Python imports, with its series; ``BadInput`` where no pin of ``key`` has one."""
    spec = UPSTREAMS[key]
    root = package_root(spec.package)
    version = spec.read_version(root)
    pin, default = pins.series_pin(key, version), pins.default_for(key)
    if pin is None or default is None:
        raise BadInput(f"{pins.source} pins no series for {key}")
    return Upstream(spec.package, spec.distribution, root, version, pin.series, default.series)


def applied(upstream: Upstream, patches: tuple[Patch, ...]) -> set[str]:
    """The patches the imported tree holds, by content: apply's own check of a series on a tree (it reads the tree
    only, and finds each patch also where later patches changed its lines). Each patch is judged on its package's
    files only: a release installed from a wheel has no ``tests/``, which most patches also change."""
    package = f"{upstream.package}/"
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("doctor")) as tmp:
        installed = []
        for patch in patches:
            text = patchtext.only_paths(patch.text, lambda path: path.startswith(package))
            if not patchtext.patch_paths(text):
                continue  # upstream's tests only: nothing a release installs
            if text != patch.text:
                (Path(tmp) / patch.name).write_bytes(text.encode("utf-8", "surrogateescape"))
                patch = read_patch(Path(tmp) / patch.name)
            installed.append(patch)
        steps = plan_series(upstream.root, installed, version=upstream.version)
    return {step.patch.name for step in steps if step.action is Action.NOTHING}


@functools.cache  # a Trinity run asks for both upstreams: one status run (8 CPU-s) answers both
def _overlaid() -> frozenset[str]:
    """``distribution:0001-...`` of each patch an overlay changes here: asked of ``python -m patchset_overlay status``
    only when the overlay's start-up hook (``patchset_overlay.pth``) ran in this interpreter, as in the trainer's."""
    startup = sys.modules.get("patchset_overlay.startup")
    if startup is None or startup.outcome != startup.AUTOMATIC:
        return frozenset()
    status = [sys.executable, "-m", "patchset_overlay", "status", "--json"]
    report = json.loads(subprocess.run(status, capture_output=True, text=True, check=True).stdout)
    return frozenset(
        f"{entry['upstream']}:{name}"
        for entry in report
        for piece in entry["pieces"]
        if piece["state"] == "active"
        for name in piece["patches"]
    )


def fix_here(upstream: Upstream, patch: Patch, present: set[str], overlaid: frozenset[str]) -> str | None:
    """How ``patch``'s fix reaches this environment, or None where it does not."""
    if patch.upstream_since and at_least(upstream.version, patch.upstream_since):
        return f"in {upstream.package} {patch.upstream_since}"
    if patch.name in present:
        try:
            wheel = "+patchset" in importlib.metadata.version(upstream.distribution)
        except importlib.metadata.PackageNotFoundError:
            wheel = False
        return "patched wheel" if wheel else "patched tree"
    return "overlay" if f"{upstream.distribution}:{patch.path.stem}" in overlaid else None


def effect(kind: str, split: Shape) -> str:
    """What the split does to a loss of ``kind`` ("scale", "rows", "choice") at ``split``'s settings, in a phrase."""
    if kind == "scale":
        size = f"x {split.most}" if not split.dynamic else f"varies with response length, up to x {split.most}"
        text = size + (" at these token budgets" if split.dynamic else f" (K = {split.rows} / {split.micro})")
    elif kind == "rows":  # Trinity's legacy actors: upstream weights each micro-batch by its share of rows
        text = f"up to {split.most} micro-batches weighted by rows: token-mean off, seq-mean-token-sum-norm x 1/K"
    else:
        per = "by token budget" if split.dynamic else f"{split.micro} of {split.rows} sequences"
        text = f"chosen per micro-batch ({per}; up to {split.most} per rank) and per dp rank ({split.dp})"
    if split.strategy == "megatron":
        text += f"; Megatron (tp x pp x cp = {split.sp}): the engine undoes its own 1/K, so x K all the same"
    elif split.sp > 1:
        text += f"; Ulysses sp {split.sp}: K per dp rank of {split.sp} GPUs, token budget x {split.sp}"
    return text


def assess(
    config: dict[str, Any], upstream: Upstream, patches_dir: Path, models: tuple[str, ...] = (ACTOR, CRITIC)
) -> list[Row]:
    """One row a loss of ``upstream``'s series that the run uses, trained on one of ``models``."""
    config = dict(config, critic=dict(config.get("critic") or {}))
    if config["critic"].get("enable") is None:  # verl's need_critic: a critic for GAE unless critic.enable says
        config["critic"]["enable"] = get(config, "algorithm.adv_estimator") == "gae"
    own, declared = read_parts(patches_dir / upstream.series), read_parts(patches_dir / upstream.default_series)
    overlaid, series = _overlaid(), load_series(patches_dir, upstream.series)
    present = applied(upstream, series.patches)
    # a loss the default series fixes and this release's series does not (verl 0.7.0's KL-Cov): no fix acts
    carried = {slug_of(patch.name) for patch in series.patches}
    others = [p for p in load_series(patches_dir, upstream.default_series).patches if slug_of(p.name) not in carried]
    rows = []
    for patch in (*series.patches, *others):
        slug = slug_of(patch.name)
        uses = own.get(slug, {}).get("uses") or declared.get(slug, {}).get("uses")
        model = CRITIC if uses and any(key.startswith("critic.") for key in uses["when"]) else ACTOR
        if not uses or model not in models or not all(holds(config, setting) for setting in uses["when"]):
            continue
        split = shape(config, model)
        affected = split.most > 1 or (uses["effect"] == "choice" and split.dp > 1)
        fix = fix_here(upstream, patch, present, overlaid)
        keys = [setting.partition("=")[0] for setting in uses.get("not_fixed_when", []) if holds(config, setting)]
        blocked = [f"{key}={str(get(config, key)).lower()}" for key in keys]
        if not affected:
            state = "no effect at these settings"
        elif fix is None:
            release = "" if slug in carried else f" (no patch for {upstream.package} {upstream.version})"
            state = "NOT FIXED here" + release
        elif blocked:
            state = f"NOT COVERED: the fix does not act with {', '.join(blocked)}"
        else:
            state = fix
        loss = (declared.get(slug) or own[slug]).get("summary", patch.subject).split(";")[0]
        uncovered = affected and (fix is None or bool(blocked))
        where = f"{patch.path.parent.name} {patch.name[:4]}"
        rows.append(Row(model, loss, where, effect(uses["effect"], split), state, affected, uncovered))
    return rows


def assess_verl(config: dict[str, Any], module: str, patches_dir: Path, verl: Upstream) -> list[Row]:
    """The rows of a launch of the entry point ``module``: its series' losses, or the one loss of SFT, or the actor's
    that needs no fix. The entry point decides, not the config's name: a PPO run may compose a config of its own."""
    unaffected = ("", "none: global normalization", "not needed", False, False)
    if ENTRY_POINTS[module] == SFT_CONFIG:
        return [Row("sft", "SFT `sft_loss`", *unaffected)]
    rows = assess(config, verl, patches_dir)
    if not any(row.model == ACTOR for row in rows):
        mode = get(config, f"{ACTOR}.policy_loss.loss_mode")
        rows.insert(0, Row(ACTOR, f"actor policy loss `{mode}`", *unaffected))
    return rows


def notes(config: dict[str, Any]) -> list[str]:
    """What doctor sees in the config that no row covers."""
    notes = []
    mode = get(config, f"{ACTOR}.policy_loss.loss_mode")
    if get(config, "algorithm.rollout_correction.bypass_mode") is True and mode != "bypass_mode":
        notes.append(
            "algorithm.rollout_correction.bypass_mode is set, but the actor's policy_loss.loss_mode is "
            f"{mode}: the workers train with {mode} (verl#4912, #4930): configure bypass mode on the actor"
        )
    legacy = get(config, "trainer.use_legacy_worker_impl")
    if legacy in ("auto", "enable"):  # verl 0.7.x's default
        notes.append(
            f"trainer.use_legacy_worker_impl={legacy}: verl's legacy workers train this run; they scale each "
            "micro-batch's loss themselves (the critic and geo_mean do not depend on the split there)"
        )
    return notes
