"""What a pytest run of the regression suite did, from its JUnit XML reports: read by ``apply`` (a patch's teeth on
a tree as shipped) and by ``export-pr`` (a fix's teeth on a cherry-pick of upstream's commit)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Counts:
    """One run of the suite: pytest's exit status and the tests that passed, failed, errored and were skipped."""

    returncode: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0

    def __str__(self) -> str:
        counted = [f"{self.passed} passed", f"{self.failed} failed"]
        counted += [f"{n} {what}" for n, what in ((self.errors, "errors"), (self.skipped, "skipped")) if n]
        return ", ".join(counted)


def junit_counts(returncode: int, folder: Path) -> Counts:
    """The counts of the JUnit XML reports in ``folder``, summed (none there, or one cut short: nothing counted)."""
    passed = failed = errors = skipped = 0
    for report in sorted(folder.glob("*.xml")):
        try:
            suites = list(ElementTree.parse(report).getroot().iter("testsuite"))
        except ElementTree.ParseError:
            return Counts(returncode)
        for suite in suites:
            tests, skips = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
            fails, errs = int(suite.get("failures", 0)), int(suite.get("errors", 0))
            passed += tests - fails - errs - skips
            failed, errors, skipped = failed + fails, errors + errs, skipped + skips
    return Counts(returncode, passed, failed, errors, skipped)
