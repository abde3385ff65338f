"""Which split-dependent losses a composed verl run uses, how much the split changes each at its settings, and
whether the fix acts in this environment.

A loss is in the run when its patch's ``uses.when`` settings (``patches/verl/parts.toml``) all hold on the composed
config. The fix acts when the verl files this Python imports hold the patch's change (a patched tree or wheel,
recognised by content), when the overlay installed at this interpreter's start-up changed them, or when the release
has it upstream; and not where ``uses.not_fixed_when`` holds (KL-Cov on the Megatron engine, say)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from patchset.doctor.compose import Shape, get, shape
from patchset.plumbing import gitops
from patchset.series.model import Patch, load_series
from patchset.series.parts import read_parts, slug_of
from patchset.upstreams.pins import at_least

ACTOR, CRITIC = "actor_rollout_ref.actor", "critic"
PPO_CONFIGS = ("ppo_trainer", "ppo_megatron_trainer")


@dataclass(frozen=True)
class Row:
    loss: str
    patch: str  # the series' patch file that fixes it ("" for a loss that needs none)
    effect: str  # what the split does to it at these settings
    fix: str  # how the fix acts here, or why it does not
    affected: bool  # on this release, at these settings, the split changes this loss
    uncovered: bool  # and here it still does: no fix acts


def holds(config: dict[str, Any], setting: str) -> bool:
    """Whether ``key=value`` holds on ``config`` (booleans as ``true``/``false``); a missing key never holds."""
    key, _, value = setting.partition("=")
    found = get(config, key, None)
    return found is not None and str(found).lower() == value.lower()


def release(root: Path) -> str:
    return (root / "verl" / "version" / "version").read_text(encoding="utf-8").strip()


def _has_change(root: Path, patch: Patch) -> bool:
    """Whether the imported tree holds ``patch``'s change to the package (``git apply --reverse --check``)."""
    if not any(path.startswith("verl/") for path in patch.files):
        return False
    return gitops.apply_patch(root, patch.path, reverse=True, check=True, include=["verl/*"]).ok


def _overlaid() -> set[str]:
    """The verl patches (``0001-...``) the overlay changes here: asked of ``python -m patchset_overlay status`` only
    when the overlay's start-up hook (``patchset_overlay.pth``) ran in this interpreter, as it would in the
    trainer's."""
    startup = sys.modules.get("patchset_overlay.startup")
    if startup is None or startup.outcome != startup.AUTOMATIC:
        return set()
    status = [sys.executable, "-m", "patchset_overlay", "status", "--json"]
    report = json.loads(subprocess.run(status, capture_output=True, text=True, check=True).stdout)
    return {
        name
        for entry in report
        if entry["upstream"] == "verl"
        for piece in entry["pieces"]
        if piece["state"] == "active"
        for name in piece["patches"]
    }


def fix_here(root: Path, version: str, patch: Patch, overlaid: set[str]) -> str | None:
    """How ``patch``'s fix reaches this environment, or None where it does not."""
    if patch.upstream_since and at_least(version, patch.upstream_since):
        return f"in verl {patch.upstream_since}"
    if _has_change(root, patch):
        try:
            wheel = "+patchset" in importlib.metadata.version("verl")
        except importlib.metadata.PackageNotFoundError:
            wheel = False
        return "patched wheel" if wheel else "patched tree"
    return "overlay" if patch.path.stem in overlaid else None


def effect(kind: str, split: Shape) -> str:
    """What the split does to a loss of ``kind`` ("scale" or "choice") at ``split``'s settings, in one phrase."""
    if kind == "scale":
        size = f"x {split.most}" if not split.dynamic else f"varies with response length, up to x {split.most}"
        text = size + (" at these token budgets" if split.dynamic else f" (K = {split.rows} / {split.micro})")
    else:
        per = "by token budget" if split.dynamic else f"{split.micro} of {split.rows} sequences"
        text = f"chosen per micro-batch ({per}; up to {split.most} per rank) and per dp rank ({split.dp})"
    if split.strategy == "megatron":
        text += f"; Megatron (tp x pp x cp = {split.sp}): the engine undoes its own 1/K, so x K all the same"
    elif split.sp > 1:
        text += f"; Ulysses sp {split.sp}: K per dp rank of {split.sp} GPUs, token budget x {split.sp}"
    return text


def assess(config: dict[str, Any], config_name: str, patches_dir: Path, root: Path) -> tuple[list[Row], list[str]]:
    """The rows of the report, one a loss the run uses, and notes on what doctor cannot see or fix."""
    if config_name not in PPO_CONFIGS:
        return [
            Row("SFT `sft_loss`", "", "none: global normalization (docs/loss-audit.md)", "not needed", False, False)
        ], []
    version = release(root)
    config = dict(config, critic=dict(config.get("critic") or {}))
    if config["critic"].get("enable") is None:  # verl's need_critic: a critic for GAE unless critic.enable says
        config["critic"]["enable"] = get(config, "algorithm.adv_estimator") == "gae"
    series = load_series(patches_dir, "verl")
    parts = read_parts(patches_dir / "verl")
    overlaid = _overlaid()
    rows, actor_loss = [], False
    for patch in series.patches:
        uses = parts.get(slug_of(patch.name), {}).get("uses")
        if not uses or not all(holds(config, setting) for setting in uses["when"]):
            continue
        model = CRITIC if any(key.startswith("critic.") for key in uses["when"]) else ACTOR
        actor_loss |= model == ACTOR
        split = shape(config, model)
        depends = split.most > 1 or (uses["effect"] == "choice" and split.dp > 1)
        fix = fix_here(root, version, patch, overlaid)
        blocked = [setting for setting in uses.get("not_fixed_when", []) if holds(config, setting)]
        if not depends:
            state = "no effect at these settings"
        elif blocked:
            state = f"NOT COVERED: the fix does not act with {', '.join(blocked)}"
        else:
            state = fix or "NOT FIXED here"
        loss = parts[slug_of(patch.name)].get("summary", patch.subject)
        uncovered = depends and (fix is None or bool(blocked))
        rows.append(Row(loss, patch.name[:4], effect(uses["effect"], split), state, depends, uncovered))
    if not actor_loss:
        mode = get(config, f"{ACTOR}.policy_loss.loss_mode")
        rows.insert(0, Row(f"actor policy loss `{mode}`", "", "none: global normalization", "not needed", False, False))
    return rows, _notes(config)


def _notes(config: dict[str, Any]) -> list[str]:
    """What doctor sees in the config that no row covers."""
    notes = []
    mode = get(config, f"{ACTOR}.policy_loss.loss_mode")
    if get(config, "algorithm.rollout_correction.bypass_mode") is True and mode != "bypass_mode":
        notes.append(
            "algorithm.rollout_correction.bypass_mode is set, but the actor's policy_loss.loss_mode is "
            f"{mode}: the workers train with {mode} (verl#4912, #4930): configure bypass mode on the actor"
        )
    return notes


def as_json(rows: list[Row], notes: list[str], head: dict[str, Any]) -> dict[str, Any]:
    return dict(
        head, losses=[asdict(row) for row in rows], notes=notes, depends_on_split=any(r.uncovered for r in rows)
    )
