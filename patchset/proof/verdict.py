"""Pass or fail per case, from the grad_norms one tree's ranks measured.

Tolerances, relative to one micro-batch's grad_norm (why these: docs/gpu-proof.md): fp32 1e-4, where a split changes
only the order of the sums; bf16 2**-8, bf16's unit roundoff. The bug's ratio, K with K micro-batches per rank, within
15 %; a loss whose bug is not a factor (distillation's first call) more than 10 % off at every K > 1.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from patchset.proof.cases import Case, Expect, expectation

TOLERANCE = {"fp32": 1e-4, "bf16": 2.0**-8}
BUG_RATIO_TOLERANCE = 0.15
DIFFERS_AT_LEAST = 0.1


@dataclass(frozen=True)
class Measurement:
    """One engine configuration: the grad_norm `optimizer_step` returned and the time of each timed step, the
    worker's pre-pass included (``pre_pass``: that part of each)."""

    case: str
    precision: str
    split: str  # "fixed" or "dynamic"
    micro_batches: int
    grad_norm: float
    made: int  # micro-batches the engine made, per rank
    seconds: tuple[float, ...]
    pre_pass: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, row: dict) -> Measurement:
        return cls(**{**row, "seconds": tuple(row["seconds"]), "pre_pass": tuple(row.get("pre_pass", ()))})


@dataclass(frozen=True)
class Verdict:
    side: str
    case: str
    precision: str
    passed: bool | None  # None: reported, not judged (`one_step_judges`)
    detail: str


def one_step_judges(side: str, case: Case, precision: str) -> bool:
    """Whether one step's grad_norm can show what ``side`` should: not vanilla's other choice (`Expect.CHOOSES`) in
    bf16, whose tolerance (3.9e-3) is above what another choice of tokens or mean moves one step's grad_norm (0.1 % to
    2 % measured); fp32 judges it, one step and a training run (`patchset.proof.trajectory.run_judges`)."""
    return not (expectation(side, case) is Expect.CHOOSES and precision == "bf16")


def relative(rows: Iterable[Measurement], case: str, precision: str) -> dict[tuple[str, int], float]:
    """{(split, K): grad_norm / grad_norm of one micro-batch} for one case and precision."""
    chosen = [row for row in rows if row.case == case and row.precision == precision]
    reference = next((row.grad_norm for row in chosen if row.micro_batches == 1), None)
    if reference is None:
        return {}
    return {(row.split, row.micro_batches): row.grad_norm / reference for row in chosen}


def judge(side: str, case: Case, precision: str, rows: Sequence[Measurement]) -> Verdict:
    """Whether ``side``'s measurements of ``case`` show what that tree should (`cases.expectation`)."""
    ratios = relative(rows, case.name, precision)
    split = {key: value for key, value in ratios.items() if key[1] > 1}
    expect = expectation(side, case)

    def verdict(passed: bool | None, detail: str) -> Verdict:
        return Verdict(side, case.name, precision, passed, detail)

    if not split:
        return verdict(False, "no measurement with more than one micro-batch")
    mine = [row for row in rows if row.case == case.name and row.precision == precision]
    wrong_count = [
        f"{row.split} K={row.micro_batches} made {row.made}" for row in mine if row.made != row.micro_batches
    ]
    if wrong_count:
        return verdict(False, "the engine did not make the micro-batches asked for: " + ", ".join(wrong_count))
    if any(value != value for value in ratios.values()):  # NaN
        return verdict(False, "grad_norm is not a number")
    if expect is Expect.INVARIANT:
        tolerance = TOLERANCE[precision]
        worst = max(abs(value - 1.0) for value in ratios.values())
        within = worst <= tolerance
        return verdict(
            within,
            f"grad_norm {expect.value}: largest difference from K=1 {worst:.1e} ({'within' if within else 'over'} "
            f"{tolerance:.1e}, {precision})",
        )
    digits = {Expect.GROWS: 2, Expect.CHOOSES: 5, Expect.DIFFERS: 3}[expect]
    shown = ", ".join(f"x{value:.{digits}f} at {s} K={k}" for (s, k), value in sorted(split.items()))
    beyond = ""
    if expect is Expect.GROWS:
        missed = [value for (_, k), value in split.items() if abs(value / k - 1.0) > BUG_RATIO_TOLERANCE]
    elif expect is Expect.DIFFERS:
        missed = [value for value in split.values() if abs(value - 1.0) <= DIFFERS_AT_LEAST]
    elif not one_step_judges(side, case, precision):
        return verdict(None, f"reported, not judged ({precision}'s tolerance is its size; fp32 judges it): {shown}")
    else:  # another choice moves the gradient by a little: beyond reassociation is enough
        missed = [value for value in split.values() if abs(value - 1.0) <= TOLERANCE[precision]]
        beyond = f" (beyond {TOLERANCE[precision]:.1e} at every split)"
    shows = "shows" if not missed else "does not show"
    return verdict(not missed, f"{shows} the bug{beyond}, grad_norm {expect.value}: {shown}")


def median_step_seconds(
    rows: Iterable[Measurement], case: str, precision: str, pre_pass_only: bool = False
) -> float | None:
    """The median time of one timed step over every split of the case: the worker's pre-pass and `train_batch`
    (``pre_pass_only``: of the pre-pass alone)."""
    chosen = [row for row in rows if row.case == case and row.precision == precision]
    seconds = [s for row in chosen for s in (row.pre_pass if pre_pass_only else row.seconds)]
    return statistics.median(seconds) if seconds else None
