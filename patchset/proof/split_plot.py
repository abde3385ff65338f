"""``--plot``: grad_norm relative to one micro-batch against K, vanilla and patched, one panel per case and precision.

Reads the file ``--json`` writes (or the run's measurements directly); matplotlib is needed only for this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from patchset.proof.cases import CASES, SPLIT_KINDS
from patchset.proof.verdict import Measurement, relative

# patched drawn first, wide and pale, vanilla thin on top: where they coincide both stay visible
TREES = {"patched": ("tab:blue", 4.0, 0.55), "vanilla": ("tab:red", 1.5, 1.0)}
SPLIT_STYLES = {"fixed": ("-", "o"), "dynamic": ("--", "s")}


def draw(
    results: Mapping[str, Sequence[Measurement]],
    cases: Sequence[str],
    precisions: Sequence[str],
    title: str,
    output: Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        len(precisions), len(cases), figsize=(3.2 * len(cases), 3.0 * len(precisions)), squeeze=False
    )
    for row, precision in enumerate(precisions):
        for column, case in enumerate(cases):
            axis = axes[row][column]
            counts: set[int] = set()
            for side, (colour, width, alpha) in TREES.items():
                ratios = relative(results.get(side, ()), case, precision)
                for split in SPLIT_KINDS:
                    points = sorted((k, value) for (s, k), value in ratios.items() if s == split or k == 1)
                    if len(points) < 2:
                        continue
                    counts.update(k for k, _ in points)
                    style, marker = SPLIT_STYLES[split]
                    axis.plot(
                        [k for k, _ in points],
                        [value for _, value in points],
                        style,
                        marker=marker,
                        color=colour,
                        linewidth=width,
                        alpha=alpha,
                        label=f"{side}, {split}",
                    )
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
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(output, dpi=110)
    plt.close(figure)
