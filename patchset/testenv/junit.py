"""What a pytest run of the regression suite did, from its JUnit XML reports: read by ``apply`` (a patch's teeth on
a tree as shipped, and the result its run ends with) and by ``export-pr`` (a fix's teeth on a cherry-pick of
upstream's commit)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_SHOWN_REASONS = 3
_REASON_WIDTH = 90
_PATH = re.compile(r"(?:/[^\s/:]+)+/?")  # a path in a skip reason: the same skip on two trees is one reason


@dataclass(frozen=True)
class Counts:
    """One run of the suite: pytest's exit status and the tests that passed, failed, errored and were skipped; the
    skips by reason (commonest first) and the failed tests, for the lines that end ``apply``."""

    returncode: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    skip_reasons: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    failures: tuple[str, ...] = field(default=(), compare=False)  # file::test of each failed or erred test

    def __str__(self) -> str:
        counted = [f"{self.passed} passed", f"{self.failed} failed"]
        counted += [f"{n} {what}" for n, what in ((self.errors, "errors"), (self.skipped, "skipped")) if n]
        return ", ".join(counted)

    def reason_lines(self) -> list[str]:
        """At most four lines: the commonest skip reasons, then how many were skipped for the others."""
        lines = [f"  {count} skipped: {reason}" for reason, count in self.skip_reasons[:_SHOWN_REASONS]]
        if rest := self.skip_reasons[_SHOWN_REASONS:]:
            lines.append(f"  {sum(count for _, count in rest)} skipped for {len(rest)} other reasons")
        return lines


def _reason(message: str) -> str:
    first = message.removeprefix("Skipped: ").strip().splitlines()
    text = _PATH.sub("<path>", first[0]) if first else ""
    return text if len(text) <= _REASON_WIDTH else text[: _REASON_WIDTH - 3] + "..."


def junit_counts(returncode: int, folder: Path) -> Counts:
    """The counts of the JUnit XML reports in ``folder``, summed (none there, or one cut short: nothing counted)."""
    passed = failed = errors = skipped = 0
    reasons: Counter[str] = Counter()
    failures: list[str] = []
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
            for case in suite.iter("testcase"):
                if (skip := case.find("skipped")) is not None:
                    reasons[_reason(skip.get("message", ""))] += 1
                elif case.find("failure") is not None or case.find("error") is not None:
                    failures.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    return Counts(returncode, passed, failed, errors, skipped, tuple(reasons.most_common()), tuple(failures))
