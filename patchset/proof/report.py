"""What the user reads: the grad_norm table, a PASS/FAIL line per case, the step-time ratio, and the training runs'
table and verdicts (``--steps``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from patchset.proof.cases import CASES
from patchset.proof.trajectory import REFERENCE, Run, TrajectoryVerdict, clip_label, columns, runs_of, split_label
from patchset.proof.verdict import TOLERANCE, Measurement, Verdict, median_step_seconds, relative


def table(results: Mapping[str, Sequence[Measurement]], cases: Sequence[str], precisions: Sequence[str]) -> list[str]:
    """One line per case, precision and tree: grad_norm at K=1, then grad_norm / K=1's at every split, and the
    median step time."""
    shown = columns((row.split, row.micro_batches) for rows in results.values() for row in rows)
    header = ["case", "precision", "tree", "K=1 grad_norm", *(f"{s} K={k}" for s, k in shown), "step s"]
    lines = []
    for case in cases:
        for precision in precisions:
            for side, rows in results.items():
                ratios = relative(rows, case, precision)
                if not ratios:
                    continue
                one = (case, precision, 1)
                reference = next(row.grad_norm for row in rows if (row.case, row.precision, row.micro_batches) == one)
                digits = 7 if side == "patched" else 4
                cells = [f"{ratios[c]:.{digits}f}" if c in ratios else "-" for c in shown]
                seconds = median_step_seconds(rows, case, precision)
                step = f"{seconds:.3f}" if seconds is not None else "-"
                lines.append([case, precision, side, f"{reference:.7g}", *cells, step])
    return aligned([header, *lines])


def aligned(lines: Sequence[Sequence[str]]) -> list[str]:
    """Each line's cells joined by two spaces, every column padded to its widest cell."""
    widths = [max(len(cell) for cell in column) for column in zip(*lines, strict=True)]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in lines]


MARKS = {True: "PASS", False: "FAIL", None: "INFO"}


def verdict_lines(verdicts: Sequence[Verdict]) -> list[str]:
    width = max((len(CASES[v.case].title) for v in verdicts), default=0)
    return [
        f"{MARKS[v.passed]}  {v.side:<7}  {v.precision:<4}  {CASES[v.case].title:<{width}}  {v.detail}"
        for v in verdicts
    ]


def step_time_lines(
    results: Mapping[str, Sequence[Measurement]], cases: Sequence[str], precisions: Sequence[str]
) -> list[str]:
    """patched / vanilla median step time per case and precision, when both trees ran: each step's time includes
    what the worker does before the split (the patched worker's pre-pass forward, for KL-Cov's later updates and
    bypass IS), the cost a user pays per update."""
    if set(results) != {"vanilla", "patched"}:
        return []
    lines = []
    for case in cases:
        for precision in precisions:
            vanilla = median_step_seconds(results["vanilla"], case, precision)
            patched = median_step_seconds(results["patched"], case, precision)
            if vanilla and patched:
                control = "" if CASES[case].patch else "; code the series does not change: the noise floor"
                pre_pass = median_step_seconds(results["patched"], case, precision, pre_pass_only=True)
                if pre_pass:
                    control += f"; patched: the worker's pre-pass included, median {pre_pass:.3f} s of it"
                lines.append(
                    f"step time patched / vanilla: {case} {precision}: {patched / vanilla:.3f} "
                    f"({patched:.3f} s / {vanilla:.3f} s, median of every timed step{control})"
                )
    return lines


def tolerance_note(precisions: Sequence[str]) -> str:
    tolerances = ", ".join(f"{p} {TOLERANCE[p]:.1e}" for p in precisions)
    return f"tolerance for 'the same at every split': {tolerances} (why: patchset/proof/verdict.py)"


def trajectory_table(
    results: Mapping[str, Sequence[Run]], cases: Sequence[str], precisions: Sequence[str]
) -> list[str]:
    """One line per case, precision, clipping and tree: each run's final distance from K=1, the share of clipped
    steps (K=1, then the largest split), and the last step's loss at K=1."""
    every = [run for runs in results.values() for run in runs]
    shown = columns(run.key for run in every)
    header = ["case", "precision", "clip", "tree", *map(split_label, shown), "clipped K=1 / max", "loss K=1"]
    lines = []
    clips = sorted({run.clip for run in every}, key=lambda clip: math.inf if clip is None else clip)
    for case in cases:
        for precision in precisions:
            for clip in clips:
                for side, side_runs in results.items():
                    runs = runs_of(side_runs, case, precision, clip)
                    if REFERENCE not in runs:
                        continue
                    cells = [f"{runs[key].distance:.2e}" if key in runs else "-" for key in shown]
                    shares = [runs[REFERENCE].clipped_share, max(run.clipped_share or 0.0 for run in runs.values())]
                    clipped = "-" if clip is None else " / ".join(f"{share:.0%}" for share in shares)
                    loss = f"{runs[REFERENCE].steps[-1].loss:.5g}"
                    lines.append([case, precision, clip_label(clip), side, *cells, clipped, loss])
    return aligned([header, *lines])


def trajectory_verdict_lines(verdicts: Sequence[TrajectoryVerdict]) -> list[str]:
    return [
        f"{MARKS[v.passed]}  {v.side:<7}  {v.precision:<4}  clip {clip_label(v.clip):<3}  {v.case:<12}  {v.detail}"
        for v in verdicts
    ]
