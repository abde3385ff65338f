"""`python -m patchset_overlay status`'s text, rendered from a report as `collect` makes it."""

from __future__ import annotations

import pytest

from patchset_overlay import status

PIECE = {"piece": "critic", "state": "off", "reason": "switched off by PATCHSET_OVERLAYS=0"}
SERIES = {"revision": None, "series": {}}


def _report(patches: list[str]) -> list[dict]:
    entry = {"overlay": "verl_overlay", "enabled": False, "how": "off", "upstream": "verl", "version": "0.8.0"}
    pieces = [{**PIECE, "patches": patches}]
    return [{**entry, "problem": None, "pieces": pieces, "cannot_change": "", "series": SERIES}]


@pytest.mark.parametrize(
    ("patches", "shown"),
    [
        (["0001-trainer-critic-value-loss-global-normalization"], "critic (0001): off"),
        (["trainer-critic-value-loss-global-normalization"], "critic (trainer-critic-value-loss-global-normalization)"),
    ],
    ids=["series-known", "series-unknown"],
)
def test_status_names_each_patch_by_its_number_or_whole_slug(patches: list[str], shown: str) -> None:
    """Where the release's series is not known (verl missing, or unreadable), the pieces carry slugs, once cut to four
    letters ("trai")."""
    assert shown in status.render(_report(patches))


@pytest.mark.parametrize(("switch", "hinted"), [("", True), ("1", True), ("0", False), ("off", False)])
def test_status_hints_at_the_switch_only_while_it_is_on(switch: str, hinted: bool, monkeypatch) -> None:
    monkeypatch.setenv("PATCHSET_OVERLAYS", switch)
    assert ("PATCHSET_OVERLAYS=0 to switch" in status.render(_report([]))) is hinted
