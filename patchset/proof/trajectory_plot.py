"""``--steps N --plot``: the loss and the pre-clip grad_norm of every step, vanilla against patched, per K.

One row per case and precision; per clipping setting, a loss panel and a grad_norm panel. Patched runs are drawn wide
and pale (they lie on one another), vanilla thin on top, one line style per split. matplotlib is needed only here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from patchset.proof.trajectory import REFERENCE, Run, clip_label, columns, runs_of, split_label

TREES = {"patched": ("tab:blue", 4.0, 0.45), "vanilla": ("tab:red", 1.3, 1.0)}
STYLES = {("fixed", 1): "-", ("fixed", 2): "--", ("fixed", 4): ":", ("dynamic", 2): "-.", ("dynamic", 4): (0, (1, 3))}
OTHER_STYLE = (0, (3, 1, 1, 1))  # a split --micro-batches asked for beyond 1, 2 and 4


def draw_trajectories(
    results: Mapping[str, Sequence[Run]], cases: Sequence[str], precisions: Sequence[str], title: str, output: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    every = [run for runs in results.values() for run in runs]
    clips = sorted({run.clip for run in every}, key=lambda clip: math.inf if clip is None else clip)
    # the shuffled run is left out: it lies on K=1 (its distance is in the table)
    keys = [REFERENCE, *(key for key in columns(every) if key[0] != "shuffled")]
    rows = [(case, precision) for case in cases for precision in precisions]
    figure, axes = plt.subplots(
        len(rows), 2 * len(clips), figsize=(3.4 * 2 * len(clips), 2.6 * len(rows)), squeeze=False
    )
    for row, (case, precision) in enumerate(rows):
        for block, clip in enumerate(clips):
            loss_axis, norm_axis = axes[row][2 * block], axes[row][2 * block + 1]
            for side, (colour, width, alpha) in TREES.items():
                runs = runs_of(results.get(side, ()), case, precision, clip)
                for key in keys:
                    if key not in runs:
                        continue
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
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    plt.close(figure)
