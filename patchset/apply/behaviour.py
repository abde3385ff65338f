"""Retire a patch that neither applies nor is upstream by content when its teeth pass on the tree as shipped:
upstream fixed the bug its own way. Not on a pinned release whose files differ from its sdist (a local change)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

from patchset.apply.plan import Action, Behaviour, Settle, Step, Verdict, conflicts
from patchset.apply.target import TreeToPatch
from patchset.plumbing import files, tempdirs
from patchset.plumbing.ui import Console
from patchset.series.parts import PARTS_FILE
from patchset.testenv import regression
from patchset.testenv.junit import Counts, junit_counts
from patchset.testenv.venv import VenvError
from patchset.upstreams.fetch import ensure_upstream
from patchset.upstreams.workspace import Workspace


def _untested(target: TreeToPatch, selection: str | None, why: str) -> Behaviour:
    """Undecided; ``--check`` runs the teeth and changes nothing, so it is the command that decides it."""
    return Behaviour(Verdict.UNTESTED, selection, why=why, command=f"scripts/apply.sh --check {target.shown}")


def verdict(target: TreeToPatch, selection: str, counts: Counts) -> Behaviour:
    """Fixed when a test passed and none failed or errored; the bug when one failed; else undecided."""
    if counts.failed:
        return Behaviour(Verdict.BUG, selection, counts.passed, counts.failed, why=str(counts))
    if counts.returncode == 0 and counts.passed and not counts.errors:
        return Behaviour(Verdict.FIXED, selection, counts.passed, why=str(counts))
    if counts.errors:
        return _untested(target, selection, f"its tests could not run on this tree ({counts})")
    if not counts.passed:
        return _untested(target, selection, f"its tests ran none on this tree ({counts})")
    return _untested(target, selection, f"pytest stopped with exit status {counts.returncode} ({counts})")


class TeethRunner:
    """Runs a patch's teeth on a tree as shipped, with the run's workspace and console."""

    def __init__(self, workspace: Workspace, console: Console, timeout: float | None = None) -> None:
        self.workspace, self.console, self.timeout = workspace, console, timeout

    def local_changes(self, target: TreeToPatch, paths: Sequence[str]) -> list[str]:
        """Of ``paths``, those that differ from the verified sdist of ``target``'s pinned release (none unpinned)."""
        pin = self.workspace.pins.find(target.key, target.version)
        if pin is None or not pin.target:
            return []
        release = ensure_upstream(pin, self.workspace.cache, self.console)
        return [rel for rel in paths if not files.same(target.root / rel, release / rel)]

    def __call__(self, target: TreeToPatch, selection: str) -> Behaviour:
        self.console.step(
            f"Running its tests on {target.label} as shipped (tests/regression -k {selection!r}, expecting the fix)"
        )
        with tempfile.TemporaryDirectory(prefix=tempdirs.prefix("teeth")) as tmp:
            try:
                run = regression.SuiteRun(
                    expect="fixed",
                    pytest_args=["-k", selection, "--tb=no", "-p", "no:warnings"],
                    junit_dir=Path(tmp),
                    parallel=False,
                    limit=regression.suite_limit(self.timeout),
                )
                code = regression.run_regression_tests({target.key: target.root}, run, self.workspace, self.console)
            except VenvError as error:
                first = str(error).splitlines()[0]
                return _untested(target, selection, f"the test environment could not be built ({first})")
            counts = junit_counts(code, Path(tmp))
        return verdict(target, selection, counts)


def _judge(runner: TeethRunner | None, target: TreeToPatch, step: Step) -> Step:
    """``step``, a conflict, with what its teeth say; a SKIP when they pass on the tree as shipped."""
    selection = target.series.teeth.get(step.patch.name)
    if selection is None:
        behaviour = _untested(target, None, f"{target.series.path.parent / PARTS_FILE} names no tests for it")
    elif runner is None:
        behaviour = _untested(target, selection, "its tests were not run (--no-test)")
    elif changed := runner.local_changes(target, step.patch.files):
        behaviour = Behaviour(Verdict.LOCAL, selection, why=", ".join(changed))
    else:
        behaviour = runner(target, selection)
    return dataclasses.replace(step, action=Action.SKIP if behaviour.fixed else step.action, behaviour=behaviour)


def settler(runner: TeethRunner | None) -> Settle:
    """The ``settle`` of ``plan_target``: each conflict judged by its teeth through ``runner`` (None: ``--no-test``)."""

    def settle(target: TreeToPatch, steps: Sequence[Step]) -> list[Step]:
        judged = {id(step) for step in conflicts(steps)}
        return [_judge(runner, target, step) if id(step) in judged else step for step in steps]

    return settle
