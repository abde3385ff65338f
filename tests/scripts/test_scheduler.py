"""The test command's scheduler: independent steps run at once, each step's output is printed whole, a step waits
for those it comes after and is not run when one it needs failed, and every step is in the results in plan order.

The steps here are small python processes that leave files behind, so what ran, in which order and beside what is
read from what they did, never from the clock."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from patchset.testcommand.scheduler import Scheduler, Step, summary


def _python(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def _waits_for(path: Path, seconds: float = 20.0) -> str:
    """Code that exits 0 once ``path`` exists, 1 if it did not appear within ``seconds``."""
    return (
        "import pathlib, sys, time\n"
        f"end = time.monotonic() + {seconds}\n"
        f"while not pathlib.Path({str(path)!r}).exists() and time.monotonic() < end: time.sleep(0.05)\n"
        f"sys.exit(0 if pathlib.Path({str(path)!r}).exists() else 1)"
    )


def _run(steps: list[Step], jobs: int, tmp_path: Path) -> tuple[list, str]:
    out = io.StringIO()
    results = Scheduler(steps, jobs, tmp_path, {"PATH": "/usr/bin:/bin"}, out=out, progress_every=0.5).run()
    return results, out.getvalue()


def test_independent_steps_run_at_once(tmp_path):
    """The first step can only pass if the second runs while it waits: with two jobs it does."""
    flag = tmp_path / "second-ran"
    steps = [
        Step("waits", "waits for the other", _python(_waits_for(flag))),
        Step("touches", "makes the flag", _python(f"import pathlib; pathlib.Path({str(flag)!r}).touch()")),
    ]
    results, _ = _run(steps, 2, tmp_path)
    assert [(result.name, result.passed) for result in results] == [("waits", True), ("touches", True)]


def test_one_job_runs_the_steps_one_after_another(tmp_path):
    """The teeth of the test above: one at a time, the waiting step never sees the flag."""
    flag = tmp_path / "second-ran"
    steps = [
        Step("waits", "waits for the other", _python(_waits_for(flag, seconds=1.0))),
        Step("touches", "makes the flag", _python(f"import pathlib; pathlib.Path({str(flag)!r}).touch()")),
    ]
    results, _ = _run(steps, 1, tmp_path)
    assert [(result.name, result.passed) for result in results] == [("waits", False), ("touches", True)]


def test_each_steps_output_is_printed_whole_when_it_ends(tmp_path):
    """Two steps print lines in turn (each waits for the other's file before its next line): the output still
    holds each step's lines together, under its own header, followed by its verdict."""
    code = (
        "import pathlib, sys, time\n"
        "me, other = sys.argv[1], sys.argv[2]\n"
        "for n in range(3):\n"
        "    print(f'{me} line {n}', flush=True)\n"
        f"    pathlib.Path({str(tmp_path)!r}, f'{{me}}{{n}}').touch()\n"
        "    end = time.monotonic() + 20\n"
        f"    while not pathlib.Path({str(tmp_path)!r}, f'{{other}}{{n}}').exists() and time.monotonic() < end:\n"
        "        time.sleep(0.02)\n"
    )
    steps = [
        Step("a", "prints a lines", (sys.executable, "-c", code, "a", "b")),
        Step("b", "prints b lines", (sys.executable, "-c", code, "b", "a")),
    ]
    results, out = _run(steps, 2, tmp_path)
    assert all(result.passed for result in results)
    for name in ("a", "b"):
        block = out.split(f"=== {name}: prints {name} lines\n", 1)[1].split(f"=== {name}: ok in", 1)[0]
        assert block.splitlines() == [f"{name} line {n}" for n in range(3)], out


def test_a_step_waits_for_what_it_comes_after_and_is_not_run_without_what_it_needs(tmp_path):
    record = tmp_path / "record"
    write = f"import sys; open({str(record)!r}, 'a').write(sys.argv[1] + '\\n'); sys.exit(int(sys.argv[2]))"
    steps = [
        Step("fails", "fails", (sys.executable, "-c", write, "fails", "1")),
        Step("needs it", "never runs", (sys.executable, "-c", write, "needs it", "0"), needs=("fails",)),
        Step("after it", "runs once it ended", (sys.executable, "-c", write, "after it", "0"), after=("fails",)),
        Step("independent", "runs", (sys.executable, "-c", write, "independent", "0")),
    ]
    results, out = _run(steps, 2, tmp_path)

    ran = record.read_text().splitlines()
    assert "needs it" not in ran and ran.index("fails") < ran.index("after it") and "independent" in ran
    assert [(result.name, result.passed, result.note) for result in results] == [
        ("fails", False, ""),
        ("needs it", False, "not run: fails failed"),
        ("after it", True, ""),
        ("independent", True, ""),
    ]
    table = summary(results, 1.0, 2, 3.0)
    header, *rows, total = table.splitlines()
    assert header.split() == ["wall", "cpu", "step"] and total == "  total 1s, 3s of CPU (up to 2 steps at a time)"
    assert "FAIL" in rows[1] and "not run: fails failed" in table
    assert [line.split()[-1] for line in rows] == ["fails", "failed", "ended", "runs"]
    # the CPU time of each step that ran is what wait4 reported for its process; a step not run has none
    assert all(result.cpu_seconds is not None for result in results if result.name != "needs it")
    assert rows[1].split()[2] == "-"
    assert "=== needs it: not run: fails failed" in out


def test_a_long_step_is_reported_while_it_runs(tmp_path):
    flag = tmp_path / "go"
    steps = [
        Step("slow", "waits", _python(_waits_for(flag))),
        Step(
            "ends it",
            "after a progress line",
            _python(f"import time, pathlib; time.sleep(1.5); pathlib.Path({str(flag)!r}).touch()"),
        ),
    ]
    results, out = _run(steps, 2, tmp_path)
    assert all(result.passed for result in results)
    assert "... running: " in out and "slow (" in out


def test_a_step_may_only_wait_for_an_earlier_step(tmp_path):
    with pytest.raises(ValueError, match="'first' waits for \\['second'\\]"):
        Scheduler([Step("first", "", ("true",), needs=("second",)), Step("second", "", ("true",))], 2, tmp_path, {})
