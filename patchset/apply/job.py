"""One apply run: lock the trees, plan every patch, refuse what is in the way, apply all or nothing, then test.
``apply_series`` is the one way the series goes onto trees (``apply`` and the wheel build)."""

from __future__ import annotations

import functools
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from patchset.apply.behaviour import TeethRunner, settler
from patchset.apply.earlier import Held, describe, held_series, read_record, remove_record, today_series, write_record
from patchset.apply.locking import locked, refuse_if_held
from patchset.apply.plan import Action, Plan, plan_target
from patchset.apply.refusals import refuse, refuse_duplicates
from patchset.apply.report import report_plan, summary_line
from patchset.apply.target import TreeToPatch, cached_targets, target_for_path
from patchset.apply.transaction import apply_plans
from patchset.apply.upgrade import run_upgrade
from patchset.plumbing import signals, tempdirs
from patchset.plumbing.errors import EXIT_EARLIER_SERIES, EXIT_OK, EXIT_TESTS_FAILED, BadInput, EarlierSeries
from patchset.plumbing.ui import Console, display_path
from patchset.series.history import History, load_history
from patchset.testenv import regression
from patchset.testenv.junit import junit_counts
from patchset.upstreams.workspace import Workspace


@dataclass(frozen=True)
class ApplyOptions:
    """``apply``'s options of the same names; those that cannot go together are refused before anything is read."""

    check: bool = False
    reverse: bool = False
    three_way: bool = False
    allow_dirty: bool = False
    no_test: bool = False
    force_version: bool = False
    test_timeout: float | None = None
    upgrade: bool = False

    def __post_init__(self) -> None:
        if self.three_way and self.reverse:
            raise BadInput(
                "--3way merges patches in; it cannot be combined with --reverse (take a merged patch out "
                "with git checkout or git diff -R | git apply)"
            )
        if self.test_timeout is not None and not 0 < self.test_timeout < float("inf"):
            raise BadInput(f"--test-timeout must be a positive number of seconds, not {self.test_timeout:g}")
        if self.upgrade and (self.reverse or self.three_way):
            other = "--reverse" if self.reverse else "--3way"
            raise BadInput(f"--upgrade replaces an earlier series with today's; it cannot be combined with {other}")


def choice_tests_left_out(plans: Sequence[Plan], console: Console) -> list[str]:
    """The ``-k`` expressions of the choice tests (``parts.toml``) of the patches retired by behaviour, each said."""
    left_out = []
    for plan in plans:
        for step in plan.steps:
            choices = plan.target.series.choices.get(step.patch.name)
            if step.fixed_upstream and choices:
                console.step(
                    f"Leaving out {step.patch.name}'s tests of this series' own choices (-k {choices!r}): upstream "
                    f"fixed its bug its own way on {plan.target.label}, and they would judge its form by ours"
                )
                left_out.append(choices)
    return left_out


def _regression(
    trees: Mapping[str, Path], workspace: Workspace, console: Console, timeout: float | None, left_out: Sequence[str]
) -> tuple[int, list[str]]:
    """Run the regression tests on ``trees`` into a log file; (exit status, the lines that say what they found)."""
    shown = ", ".join(f"{key} at {display_path(path)}" for key, path in trees.items())
    log = workspace.cache.root / "logs" / f"apply-{time.strftime('%Y%m%d-%H%M%S')}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    console.step(f"Running the regression tests on {shown} (a few minutes; their output: {display_path(log)})")
    deselect = ["-k", "not (" + " or ".join(f"({choices})" for choices in left_out) + ")"] if left_out else []
    with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("junit")) as junit, log.open("w") as output:
        limit = regression.suite_limit(timeout)
        run = regression.SuiteRun("fixed", deselect, junit_dir=Path(junit), limit=limit, output=output)
        returncode = regression.run_regression_tests(trees, run, workspace, console)
        counts = junit_counts(returncode, Path(junit))
    lines = [f"Regression tests {'passed' if returncode == 0 else 'FAILED'}: {counts}", *counts.reason_lines()]
    lines.append(f"Full output: {display_path(log)}")
    if returncode != 0:
        failed = ", ".join(counts.failures[:3]) or f"pytest exit status {returncode}"
        print(f"error: the regression tests failed on {shown}: {failed}; see {display_path(log)}", file=sys.stderr)
        return EXIT_TESTS_FAILED, lines
    return EXIT_OK, lines


def _refuse_earlier(targets: Sequence[TreeToPatch], earlier: Mapping[Path, Held | None]) -> str:
    """The message for trees that hold an earlier series; "" when none does."""
    lines = [describe(target, held) for target in targets if (held := earlier[target.root]) is not None]
    if not lines:
        return ""
    paths = " ".join(target.shown for target in targets)
    return (
        "; ".join(lines) + f". Its patches are ours, not an upstream fix; nothing was changed. Next: scripts/apply.sh "
        f"--upgrade {paths} (takes the earlier series out exactly, applies today's and runs the tests, all or nothing)"
    )


def _record(plans: Sequence[Plan], homes: Mapping[Path, Path], history: History, console: Console) -> None:
    """Record today's series in each tree this run patched, forget it where it took the series out."""
    for plan in plans:
        if not plan.count(Action.CHANGE):
            continue
        if plan.reverse:
            problem = remove_record(homes, plan.target)
        else:
            problem = write_record(homes, plan.target, today_series(plan.target, history))
        if problem is not None:
            console.warn(f"{problem}; the tree is as reported, and a later run recognises it by content")


@dataclass(frozen=True)
class Applied:
    """What `apply_series` did: its exit status, each tree's plan (none when it stopped before planning)."""

    status: int
    plans: tuple[Plan, ...] = ()
    tests: tuple[str, ...] = ()  # what the regression tests found, and where their output is


def apply_series(
    targets: Sequence[TreeToPatch],
    workspace: Workspace,
    options: ApplyOptions,
    *,
    console: Console,
    guard: signals.Guard,
    command_line: str,
    regression: bool = True,
) -> Applied:
    """Apply the series to ``targets``, then test them (``regression``); a refusal raises ``PatchsetError``."""
    check, reverse = options.check, options.reverse
    trees = {target.key: target.root for target in targets}
    with locked(targets, command_line, console, guard) as homes:
        history = load_history(workspace.patches_dir)
        # the earlier series each tree holds, recorded or recognised by content (None: none)
        earlier = {target.root: held_series(target, history, read_record(homes, target)) for target in targets}
        if options.upgrade and any(earlier.values()):
            tests = functools.partial(_regression, trees, workspace, console, options.test_timeout, [])
            status = run_upgrade(
                [(target, earlier[target.root], today_series(target, history)) for target in targets],
                workspace=workspace,
                homes=homes,
                test=None if options.no_test or check else tests,
                allow_dirty=options.allow_dirty,
                dry_run=check,
                console=console,
                guard=guard,
            )
            return Applied(status)
        if message := _refuse_earlier(targets, earlier):
            if not check:
                raise EarlierSeries(message)
            console.summary(message)
            return Applied(EXIT_EARLIER_SERIES)
        # a patch that neither applies nor is in upstream by content: its teeth decide whether upstream fixed the bug
        settle = settler(None if options.no_test else TeethRunner(workspace, console, options.test_timeout))
        plans = tuple(
            plan_target(target, reverse=reverse, merge=options.three_way, settle=settle) for target in targets
        )
        if check:
            for plan in plans:
                report_plan(plan, console)
        refuse(plans, allow_dirty=options.allow_dirty)
        if check:
            return Applied(EXIT_OK, plans)
        for plan in plans:
            if plan.dirty:
                verb = "reverting" if plan.reverse else "patching"
                console.warn(f"{verb} despite uncommitted changes in {', '.join(plan.dirty)} (--allow-dirty)")
        apply_plans(plans, console, guard, homes)
        _record(plans, homes, history, console)
        if reverse or not regression:
            return Applied(EXIT_OK, plans)
        if options.no_test:
            console.step("Skipping the regression tests (--no-test)")
            return Applied(EXIT_OK, plans)
        left_out = choice_tests_left_out(plans, console)
        status, lines = _regression(trees, workspace, console, options.test_timeout, left_out)
        return Applied(status, plans, tuple(lines))


def run_apply(
    paths: Sequence[str],
    workspace: Workspace,
    options: ApplyOptions,
    *,
    console: Console,
    guard: signals.Guard,
    command_line: str,
) -> int:
    """`apply_series` on the trees at ``paths`` (none: fresh patched clones of the default pins, held for the run)."""
    tempdirs.sweep()  # what runs killed before left in the temp folder
    held = ExitStack()
    if paths:
        targets = []
        force, check = options.force_version, options.check
        for path in paths:
            try:
                targets.append(target_for_path(path, workspace, force_version=force, console=console, check=check))
            except BadInput:
                refuse_if_held(Path(path).expanduser(), path)  # not recognised mid-change: exit 4 naming that run
                raise
        refuse_duplicates(targets)
    else:
        targets = cached_targets(workspace, console, reverse=options.reverse, check=options.check, held=held)
    with held:
        applied = apply_series(targets, workspace, options, console=console, guard=guard, command_line=command_line)
    if applied.plans and not options.check and not options.reverse:  # what was applied where, what the tests found
        console.summary("--- result")
        for plan in applied.plans:
            console.summary(summary_line(plan, check=False))
        for line in applied.tests:
            console.summary(line)
        if applied.status == EXIT_OK:
            console.summary("Next: scripts/test.sh runs every test; docs/guide.md says how to use the patched trees")
    return applied.status
