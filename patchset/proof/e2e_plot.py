"""Draw the end-to-end engine run (``python -m patchset plot``) from what `tests/regression/test_engine_e2e.py`
recorded (``e2e-bug.jsonl``: vanilla, ``e2e-fixed.jsonl``: patched): grad_norm against micro-batches, a panel per loss
and ``loss_agg_mode``, a line per tree and world size."""

from __future__ import annotations

import json
from pathlib import Path

from engine_harness import LOSS_AGG_MODES
from patchset.plumbing.errors import BadInput
from patchset.proof import plots

COMPONENTS = {"critic": "verl 0.8.0 critic value_loss", "actor": "Trinity-RFT 0.6.0 TrinityPolicyLoss"}
TREES = {"fixed": "patched", "bug": "vanilla"}  # in the order drawn (`plots.TREES`)
WORLD_STYLES = {1: ("-", "o", "full"), 2: ("--", "s", "none")}

Series = dict[tuple[str, str, str, int], dict[int, float]]  # (expect, component, mode, ws) -> {K: grad_norm}


def load(paths: dict[str, Path]) -> Series:
    """grad_norm per micro-batch count, for each tree ("bug" / "fixed"), component, mode and world size."""
    series: Series = {}
    for expect, path in paths.items():
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            key = (expect, row["component"], row["mode"], int(row["world_size"]))
            series.setdefault(key, {})[int(row["micro_batches"])] = float(row["grad_norm"])
    return series


def markdown_table(series: Series) -> str:
    """The figures as a Markdown table: grad_norm per split, vanilla next to patched, per loss, mode and ranks."""
    counts = sorted({k for points in series.values() for k in points})
    header = ["loss", "`loss_agg_mode`", "ranks"]
    header += [f"vanilla K={k}" for k in counts] + [f"patched K={k}" for k in counts]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    world_sizes = sorted({key[3] for key in series})
    for component, title in COMPONENTS.items():
        for mode in LOSS_AGG_MODES:
            for world_size in world_sizes:
                cells = [title, f"`{mode}`", str(world_size)]
                for expect, digits in (("bug", 3), ("fixed", 6)):
                    points = series.get((expect, component, mode, world_size), {})
                    cells += [f"{points[k]:.{digits}f}" if k in points else "-" for k in counts]
                if any(cell != "-" for cell in cells[3:]):
                    lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw(series: Series, output: Path) -> None:
    figure, axes = plots.subplots(len(COMPONENTS), len(LOSS_AGG_MODES), 4.2, 3.6)
    for row, (component, title) in enumerate(COMPONENTS.items()):
        for column, mode in enumerate(LOSS_AGG_MODES):
            axis = axes[row][column]
            keys = [key for key in series if key[1:3] == (component, mode)]
            for expect, _, _, world_size in sorted(keys, key=lambda key: (list(TREES).index(key[0]), key[3])):
                points = series[expect, component, mode, world_size]
                tree = TREES[expect]
                color, width, alpha = plots.TREES[tree]
                line_style, marker, fill = WORLD_STYLES.get(world_size, (":", "^", "full"))
                counts = sorted(points)
                axis.plot(
                    counts,
                    [points[k] for k in counts],
                    color=color,
                    linewidth=width,
                    alpha=alpha,
                    linestyle=line_style,
                    marker=marker,
                    markersize=8 if fill == "none" else 6,
                    fillstyle=fill,
                    label=f"{tree}, {world_size} rank{'s' if world_size > 1 else ''}",
                )
            axis.set_title(f"{title}\n{mode}", fontsize=9)
            axis.set_xscale("log", base=2)
            axis.set_xticks([1, 2, 4], labels=["1", "2", "4"])
            axis.set_ylim(bottom=0)
            axis.grid(alpha=0.3)
            if row == len(COMPONENTS) - 1:
                axis.set_xlabel("micro-batches per rank (token budget)")
            if column == 0:
                axis.set_ylabel("grad_norm (pre-clip)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    output.parent.mkdir(parents=True, exist_ok=True)
    title = "verl 0.8.0 FSDP2 engine on CPU, tiny Qwen2, lr 0: grad_norm of one train_batch step"
    plots.save(figure, title, output, dpi=110, fontsize=11, rect=(0, 0.05, 1, 0.97))


def plot(vanilla: Path, patched: Path, output: Path, markdown: bool = False) -> None:
    """Draw ``output`` from the two runs' files (and print the Markdown table); a file missing or unreadable is bad
    input."""
    paths = {"bug": vanilla, "fixed": patched}
    missing = [str(path) for path in paths.values() if not path.is_file()]
    if missing:
        raise BadInput(
            f"no results file {', '.join(missing)}: run scripts/test.sh (or the e2e test with "
            "PATCHSET_BASELINE_DIR set) first"
        )
    try:
        series = load(paths)
    except (OSError, ValueError, KeyError) as error:
        raise BadInput(f"cannot read the results: {error}") from error
    draw(series, output)
    print(f"* wrote {output} from {vanilla} and {patched}")
    if markdown:
        print(markdown_table(series))
