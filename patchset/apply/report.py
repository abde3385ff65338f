"""What a run says: each step's line, each tree's summary, and the refusals and failures, with what to do next."""

from __future__ import annotations

from patchset.apply.plan import Action, Finding, Plan, Step, Verdict
from patchset.plumbing import gitops, patchtext
from patchset.plumbing.gitops import Merge
from patchset.plumbing.ui import Console


def where(plan: Plan) -> str:
    return f"{plan.target.label} at {plan.target.shown}"


def skip_reason(plan: Plan, step: Step) -> str:
    """Why a SKIP step is skipped: by version, by content, or because its teeth pass on the tree as shipped."""
    if step.fixed_upstream and (behaviour := step.behaviour) is not None:
        return (
            f"fixed upstream (its tests pass on {plan.target.label} as shipped: {behaviour.why}, tests/regression -k "
            f"{behaviour.selection!r})"
        )
    state = step.upstream
    if state is None or not state.matched:  # by the version alone
        return f"in upstream since {(state.since if state is not None else None) or ''}"
    has = f"{plan.target.label} has it: {', '.join(str(check) for check in state.matched)}"
    if state.claimed:
        return f"in upstream since {state.since} ({has})"
    return f"already upstream (content), {has}"


def failure_detail(plan: Plan, step: Step, *, reverted: bool = False) -> str:
    """What went wrong, in words; ``reverted`` when git's line numbers are from reverting the patch."""
    failure = step.failure
    if step.upstream_missing and step.upstream is not None:
        lacks = ", ".join(f"{check.path} {why}" for check, why in step.upstream.missing)
        return (
            f"{plan.target.label} is at or past {step.upstream.since}, the upstream version that has this change "
            f"(Applied-Upstream), but its content lacks it: {lacks}"
        )
    if step.finding is Finding.AMBIGUOUS:
        return "it applies both forward and in reverse, so whether it is applied is unclear"
    if failure is None:
        lines = step.stderr.splitlines()
        return lines[0].removeprefix("error: ") if lines else "git apply failed"
    if failure.line:
        hunk = patchtext.find_hunk(step.patch.text, failure.path, failure.line, reverse=reverted)
        at = f"hunk {hunk}" if hunk else f"the hunk at line {failure.line}"
        reason = "" if failure.reason == "patch does not apply" else f" ({failure.reason})"
        return f"{failure.path}, {at} does not match{reason}"
    return f"{failure.path}: {failure.reason}"


def behaviour_clause(plan: Plan, step: Step) -> str:
    """``; `` and what a conflicting patch's teeth said on the tree as shipped, what it means; "" when not asked."""
    behaviour = step.behaviour
    if behaviour is None or behaviour.fixed:
        return ""
    label = plan.target.label
    if behaviour.verdict is Verdict.LOCAL:
        said = (
            f"its files differ from {label}'s sdist ({behaviour.why}): local changes, or an earlier series of this "
            f"patchset, not an upstream fix (a pinned release does not change), so its tests were not run and the "
            f"conflict stands; compare them with the release (git diff), or apply to a clean checkout of it"
        )
    elif behaviour.verdict is Verdict.BUG:
        said = (
            f"its tests fail on {label} as shipped ({behaviour.why}): the bug is still there, so the conflict stands "
            f"(refresh the patch onto this release: docs/maintaining.md, adding a release)"
        )
    elif behaviour.selection is None:
        said = f"whether upstream fixed it its own way cannot be tested: {behaviour.why}"
    else:
        said = (
            f"whether upstream fixed it its own way is undecided: {behaviour.why}; '{behaviour.command}' decides it "
            f"(it runs tests/regression -k {behaviour.selection!r} on the tree as shipped, expecting the fix)"
        )
    touched = set(step.patch.files)
    earlier = [s for s in plan.steps if s.index < step.index and s.fixed_upstream and touched & set(s.patch.files)]
    if earlier:
        names = ", ".join(s.patch.name for s in earlier)
        said += (
            f"; it changes files that {names} changed, which upstream fixed its own way, so it probably builds on "
            f"that patch: refresh it onto upstream's code"
        )
    return f"; {said}"


def _state(plan: Plan, step: Step) -> str:
    if step.action is Action.CHANGE:
        if plan.reverse:
            return "applied"
        return "not applied, would merge" if step.merged else "not applied"
    if step.action is Action.NOTHING:
        return "not applied" if plan.reverse else "applied"
    if step.action is Action.SKIP:
        return skip_reason(plan, step)
    if step.upstream_missing:
        return "claimed upstream but missing there"
    if plan.reverse:
        return "neither applied nor applicable"
    if step.behaviour is not None and step.behaviour.verdict is Verdict.BUG:
        return "does not apply (its tests fail as shipped: the bug is still there)"
    if step.behaviour is not None and step.behaviour.verdict is Verdict.LOCAL:
        return f"does not apply (local changes in {step.behaviour.why})"
    return "does not apply"


def series_state(plan: Plan) -> str:
    """Every patch of the series and where it stands, in series order: ``1/2 0001-x applied, 2/2 ...``."""
    total = len(plan.target.series.patches)
    ordered = sorted(plan.steps, key=lambda s: s.index)
    return ", ".join(f"{s.index}/{total} {s.patch.name} {_state(plan, s)}" for s in ordered)


def _merge_advice(plan: Plan, step: Step, file_hint: str) -> str:
    """Whether a 3-way merge would resolve the step, and so what to do next."""
    refresh = (
        f"or refresh the patch in {plan.target.series.path.parent} (not patch --fuzz: a hunk whose context no longer "
        f"matches can land in another function, as verl 0.8's critic hunk does in 0.7.1's ppo_loss)"
    )
    compare = f"compare {file_hint} with the patch (local edits or another upstream revision)"
    result = step.merge
    if result is None or plan.reverse:
        return f"Next: {compare}, {refresh}"
    if result.outcome is Merge.RESOLVES:
        return (
            f"A 3-way merge would resolve it (checked on a scratch copy). Next: run again with --3way to merge it "
            f"into the work tree (still all or nothing; review with git diff), or {compare}, {refresh}"
        )
    if result.outcome is Merge.CONFLICTS:
        return f"A 3-way merge would not resolve it either (conflicts in {result.detail}). Next: {compare}, {refresh}"
    return f"A 3-way merge is not possible ({result.detail}). Next: {compare}, {refresh}"


def failure_message(plan: Plan, step: Step) -> str:
    """One line: which patch failed where, whether a 3-way merge would resolve it, and what to do next."""
    state = f" [series: {series_state(plan)}]" if len(plan.steps) > 1 else ""
    if step.upstream_missing:
        return (
            f"{step.patch.name} on {plan.target.shown}: {failure_detail(plan, step)}; nothing was changed{state}. "
            f"Next: look at those files in the tree: if upstream reworked that code and still has the fix, update "
            f"the Upstream-Check: lines of {step.patch.path} to recognise it; if this tree dropped the fix (a fork "
            f"or a revert), it needs the fix by other means, since the series does not apply a patch that upstream "
            f"claims to have"
        )
    verb = "is neither applied nor applicable to" if plan.reverse else "does not apply to"
    failure = step.failure
    file_hint = failure.path if failure else ", ".join(step.patch.files[:3])
    dirty_hint = f" ({file_hint} has uncommitted changes)" if failure and failure.path in plan.dirty else ""
    said = behaviour_clause(plan, step)
    return (
        f"{step.patch.name} {verb} {where(plan)}: {failure_detail(plan, step)}{dirty_hint}{said}; nothing was "
        f"changed{state}. {_merge_advice(plan, step, file_hint)}"
    )


def listing(paths: tuple[str, ...] | list[str], limit: int = 5) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def dirty_message(plan: Plan) -> str:
    files = ", ".join(plan.dirty)
    no_head = "" if gitops.has_head(plan.target.worktree) else " (the repository has no commit yet)"
    others = f"; the other uncommitted changes ({listing(plan.others)}) are not in the way" if plan.others else ""
    verb = "reverting" if plan.reverse else "patching"
    return (
        f"{plan.target.shown} has uncommitted changes in {files}, which the patches change{no_head}; nothing was "
        f"changed{others}. Next: commit or stash them, or pass --allow-dirty to go on {verb} on top of them"
    )


def out_of_order_message(plan: Plan) -> str:
    return (
        f"{where(plan)} has the series applied out of order ({series_state(plan)}): applying the rest would put an "
        f"earlier patch on top of a later one; nothing was changed. Next: take the applied patches out with "
        f"--reverse, then apply the whole series"
    )


def unwritable_message(plan: Plan, blocked: list[str]) -> str:
    return (
        f"{plan.target.shown} is read-only where the patches write: {listing(blocked)} (no write permission); "
        f"nothing was changed. Next: make it writable (chmod -R u+w {plan.target.shown}) or apply to a writable "
        f"clone (git clone {plan.target.shown} COPY)"
    )


def step_line(plan: Plan, step: Step, *, check: bool) -> str:
    """The progress line of one step: ``Applying 0001-x (1/2)``, ``0001-x already applied``, ..."""
    name, total = step.patch.name, len(plan.target.series.patches)
    if step.action is Action.CHANGE:
        how = " with a 3-way merge" if step.merged else ""
        if check:
            return f"Would {'revert' if plan.reverse else 'apply'} {name} ({step.index}/{total}){how}"
        return f"{'Reverting' if plan.reverse else 'Applying'} {name} ({step.index}/{total}){how}"
    if step.action is Action.NOTHING:
        if plan.reverse:
            return f"{name} not applied; skipping"
        return f"{name} already applied" + (" (by a 3-way merge)" if step.finding is Finding.MERGED else "")
    if step.action is Action.SKIP:
        return f"{name} skipped: {skip_reason(plan, step)}"
    if step.upstream_missing:
        return f"{name}: {failure_detail(plan, step)}"
    verb = "is neither applied nor applicable" if plan.reverse else "does not apply"
    first = plan.first_failure
    after = (
        f" (perhaps because {first.patch.name} does not)" if first and first is not step and not plan.reverse else ""
    )
    notes = {
        Merge.RESOLVES: "; a 3-way merge would resolve it (--3way)",
        Merge.CONFLICTS: "; a 3-way merge would conflict",
    }
    merge = notes.get(step.merge.outcome, "") if step.merge is not None and not plan.reverse else ""
    return f"{name} {verb}: {failure_detail(plan, step)}{after}{merge}{behaviour_clause(plan, step)}"


def partly_line(plan: Plan, *, check: bool) -> str | None:
    """``... is partly applied (...)`` when some patches are in and some are not, else None."""
    applied = Action.CHANGE if plan.reverse else Action.NOTHING
    if not any(s.action is applied for s in plan.steps) or all(s.action in (applied, Action.SKIP) for s in plan.steps):
        return None
    rest = "would revert the applied ones" if plan.reverse else "would apply the rest"
    if not check:
        rest = "reverting the applied ones" if plan.reverse else "applying the rest"
    return f"{where(plan)}: the series is partly applied ({series_state(plan)}); {rest}"


def summary_line(plan: Plan, *, check: bool) -> str:
    change, nothing = plan.count(Action.CHANGE), plan.count(Action.NOTHING)
    if plan.reverse:
        parts = [f"{change} {'would revert' if check else 'reverted'}", f"{nothing} not applied"]
    else:
        parts = [f"{change} {'would apply' if check else 'applied'}", f"{nothing} already applied"]
        if merged := sum(1 for s in plan.steps if s.merged):
            parts[0] += f" ({merged} by a 3-way merge)"
    fixed = sum(1 for s in plan.steps if s.fixed_upstream)
    if skipped := plan.count(Action.SKIP) - fixed:
        parts.append(f"{skipped} skipped")
    if fixed:
        parts.append(f"{fixed} fixed upstream (by their tests)")
    if failed := plan.count(Action.FAIL):
        parts.append(f"{failed} {'neither applied nor applicable' if plan.reverse else 'do not apply'}")
    return f"{where(plan)}: {', '.join(parts)}"


def report_plan(plan: Plan, console: Console) -> None:
    """Print the plan as a dry run (``--check``)."""
    if (line := partly_line(plan, check=True)) is not None:
        console.step(line)
    for step in plan.steps:
        console.step(step_line(plan, step, check=True))
    console.summary(summary_line(plan, check=True))
