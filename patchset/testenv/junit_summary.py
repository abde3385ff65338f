"""What a run of the regression suite found, from the JUnit XML pytest writes: counts, and the skips by reason.

``apply`` ends with these lines rather than pytest's own tail (a wall of ``s`` and one ``SKIPPED`` line per test
module), which goes to a log file it names.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_SHOWN_REASONS = 3
_REASON_WIDTH = 90
_PATH = re.compile(r"(?:/[^\s/:]+)+/?")  # a path in a reason: the same skip on two trees is one reason


@dataclass
class Outcome:
    """Counts over every JUnit report read, and the skips by reason."""

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # file::test of each failed or erred test

    def lines(self) -> list[str]:
        """At most five lines: the counts, then the commonest skip reasons."""
        head = f"{self.passed} passed, {self.failed} failed, {self.skipped} skipped"
        found = [head]
        for reason, count in self.reasons.most_common(_SHOWN_REASONS):
            found.append(f"  {count} skipped: {reason}")
        if len(self.reasons) > _SHOWN_REASONS:
            rest = sum(count for _, count in self.reasons.most_common()[_SHOWN_REASONS:])
            found.append(f"  {rest} skipped for {len(self.reasons) - _SHOWN_REASONS} other reasons")
        return found


def _reason(message: str) -> str:
    text = _PATH.sub("<path>", message.removeprefix("Skipped: ").strip().splitlines()[0] if message.strip() else "")
    return text if len(text) <= _REASON_WIDTH else text[: _REASON_WIDTH - 3] + "..."


def read_outcome(reports: list[Path]) -> Outcome:
    """The counts of the JUnit XML ``reports`` (a missing or unreadable one counts nothing)."""
    outcome = Outcome()
    for report in reports:
        try:
            root = ET.parse(report).getroot()
        except (OSError, ET.ParseError):
            continue
        for case in root.iter("testcase"):
            skipped = case.find("skipped")
            if skipped is not None:
                outcome.skipped += 1
                outcome.reasons[_reason(skipped.get("message", ""))] += 1
            elif case.find("failure") is not None or case.find("error") is not None:
                outcome.failed += 1
                outcome.failures.append(f"{case.get('classname', '')}::{case.get('name', '')}")
            else:
                outcome.passed += 1
    return outcome
