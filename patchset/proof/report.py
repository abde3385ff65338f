"""What the user reads: the grad_norm table, a PASS/FAIL line per case, and the step-time ratio."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from patchset.proof.cases import CASES, SPLIT_KINDS
from patchset.proof.verdict import TOLERANCE, Measurement, Verdict, median_step_seconds, relative


def _columns(rows: Sequence[Measurement]) -> list[tuple[str, int]]:
    return sorted(
        {(row.split, row.micro_batches) for row in rows if row.micro_batches > 1},
        key=lambda c: (SPLIT_KINDS.index(c[0]), c[1]),
    )


def table(results: Mapping[str, Sequence[Measurement]], cases: Sequence[str], precisions: Sequence[str]) -> list[str]:
    """One line per case, precision and tree: grad_norm at K=1, then grad_norm / K=1's at every split, and the
    median step time."""
    every = [row for rows in results.values() for row in rows]
    columns = _columns(every)
    header = ["case", "precision", "tree", "K=1 grad_norm", *(f"{s} K={k}" for s, k in columns), "step s"]
    lines = []
    for case in cases:
        for precision in precisions:
            for side, rows in results.items():
                ratios = relative(rows, case, precision)
                if not ratios:
                    continue
                reference = next(
                    row.grad_norm
                    for row in rows
                    if (row.case, row.precision, row.micro_batches) == (case, precision, 1)
                )
                digits = 7 if side == "patched" else 4
                cells = [f"{ratios[c]:.{digits}f}" if c in ratios else "-" for c in columns]
                seconds = median_step_seconds(rows, case, precision)
                step = f"{seconds:.3f}" if seconds is not None else "-"
                lines.append([case, precision, side, f"{reference:.7g}", *cells, step])
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines, strict=True)]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)) for line in [header, *lines]
    ]


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
    return (
        "tolerance for 'the same at every split': "
        + ", ".join(f"{p} {TOLERANCE[p]:.1e}" for p in precisions)
        + (" (why: patchset/proof/verdict.py)")
    )
