"""``--plot``'s figures, vanilla against patched (matplotlib is needed only here): grad_norm relative to one
micro-batch against K, one panel per case and precision; with ``--steps N``, the loss and the pre-clip grad_norm of
every step, per K, one row per case and precision and, per clipping setting, a loss panel and a grad_norm panel."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from patchset.proof.cases import CASES, SPLIT_KINDS
from patchset.proof.trajectory import REFERENCE, Run, clip_label, columns, runs_of, split_label
from patchset.proof.verdict import Measurement, relative

# patched drawn first, wide and pale, vanilla thin on top: where they coincide both stay visible
TREES = {"patched": ("tab:blue", 4.0, 0.55), "vanilla": ("tab:red", 1.5, 1.0)}
SPLIT_STYLES = {"fixed": ("-", "o"), "dynamic": ("--", "s")}
RUN_TREES = {"patched": ("tab:blue", 4.0, 0.45), "vanilla": ("tab:red", 1.3, 1.0)}
STYLES = {("fixed", 1): "-", ("fixed", 2): "--", ("fixed", 4): ":", ("dynamic", 2): "-.", ("dynamic", 4): (0, (1, 3))}
OTHER_STYLE = (0, (3, 1, 1, 1))  # a split --micro-batches asked for beyond 1, 2 and 4


def subplots(rows: int, columns: int, width: float, height: float) -> tuple[Any, Any]:
    """A figure of ``rows`` x ``columns`` panels of ``width`` x ``height`` inches each (``axes[row][column]``), drawn
    by matplotlib to files only (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)


def save(figure: Any, title: str, output: Path, dpi: int, fontsize: int = 10, rect: Any = None) -> None:
    """Title ``figure``, lay it out within ``rect`` (all of it by default), write it to ``output`` and close it."""
    import matplotlib.pyplot as plt

    figure.suptitle(title, fontsize=fontsize)
    figure.tight_layout(rect=rect)
    figure.savefig(output, dpi=dpi)
    plt.close(figure)


def draw(
    results: Mapping[str, Sequence[Measurement]],
    cases: Sequence[str],
    precisions: Sequence[str],
    title: str,
    output: Path,
) -> None:
    figure, axes = subplots(len(precisions), len(cases), 3.2, 3.0)
    for row, precision in enumerate(precisions):
        for column, case in enumerate(cases):
            axis = axes[row][column]
            counts: set[int] = set()
            for side, (colour, width, alpha) in TREES.items():
                look = {"color": colour, "linewidth": width, "alpha": alpha}
                ratios = relative(results.get(side, ()), case, precision)
                for split in SPLIT_KINDS:
                    points = sorted((k, value) for (s, k), value in ratios.items() if s == split or k == 1)
                    if len(points) < 2:
                        continue
                    counts.update(k for k, _ in points)
                    style, marker = SPLIT_STYLES[split]
                    ks, values = zip(*points, strict=True)
                    axis.plot(ks, values, style, marker=marker, label=f"{side}, {split}", **look)
            low, high = axis.get_ylim()  # at least 0.9 to 1.1: bf16's 1e-4 wobble is not drawn as a trend
            axis.set_ylim(min(low, 0.9), max(high, 1.1))
            axis.ticklabel_format(axis="y", useOffset=False)
            axis.set_xticks(sorted(counts))
            axis.set_title(f"{CASES[case].name}, {precision}", fontsize=9)
            axis.set_xlabel("micro-batches per rank (K)", fontsize=8)
            if column == 0:
                axis.set_ylabel("grad_norm / grad_norm at K=1", fontsize=8)
            axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    save(figure, title, output, dpi=110)


def draw_trajectories(
    results: Mapping[str, Sequence[Run]], cases: Sequence[str], precisions: Sequence[str], title: str, output: Path
) -> None:
    every = [run for runs in results.values() for run in runs]
    clips = sorted({run.clip for run in every}, key=lambda clip: math.inf if clip is None else clip)
    # the shuffled run is left out: it lies on K=1 (its distance is in the table)
    keys = [REFERENCE, *(key for key in columns(run.key for run in every) if key[0] != "shuffled")]
    rows = [(case, precision) for case in cases for precision in precisions]
    figure, axes = subplots(len(rows), 2 * len(clips), 3.4, 2.6)
    for row, (case, precision) in enumerate(rows):
        for block, clip in enumerate(clips):
            loss_axis, norm_axis = axes[row][2 * block], axes[row][2 * block + 1]
            for side, (colour, width, alpha) in RUN_TREES.items():
                runs = runs_of(results.get(side, ()), case, precision, clip)
                for key in (key for key in keys if key in runs):
                    steps = runs[key].steps
                    x = range(1, len(steps) + 1)
                    line = STYLES.get(key, OTHER_STYLE)
                    style = {"linestyle": line, "color": colour, "linewidth": width, "alpha": alpha}
                    label = f"{side}, {split_label(key)}"
                    loss_axis.plot(x, [step.loss for step in steps], label=label, **style)
                    norm_axis.plot(x, [step.grad_norm for step in steps], label=label, **style)
            if clip is not None:
                norm_axis.axhline(clip, color="grey", linewidth=0.8, linestyle="--")
            for axis, what in ((loss_axis, "loss (sum over micro-batches)"), (norm_axis, "grad_norm (pre-clip)")):
                axis.set_title(f"{case}, {precision}, clip {clip_label(clip)}", fontsize=8)
                axis.set_xlabel("optimizer step", fontsize=7)
                axis.set_ylabel(what, fontsize=7)
                axis.tick_params(labelsize=7)
                axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6, ncol=2)
    save(figure, title, output, dpi=100)
