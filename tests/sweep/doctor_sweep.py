"""Run every launch script of verl's examples with stand-ins for python3, python, torchrun, hf and ray that record each
launch line instead of running it (and for nvidia-smi, which succeeds), give each recorded line to ``patchset doctor
--json``, and print the tally.

A tool of docs/evidence/2026-12-06-doctor-example-sweep.md, not product:
``python tests/sweep/doctor_sweep.py EXAMPLES_DIR VERL_TREE OUT.json``, then ``--tally VANILLA.json PATCHED.json``."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# a launch is recorded one argument a line; a `python3 -c` probe fails, as torch_npu's does on a GPU machine
STAND_IN = """#!/bin/sh
case "$1" in -c) exit 1 ;; esac
n=$(ls "$RECORD" | wc -l); for a in "$(basename "$0")" "$@"; do printf '%s\\n' "$a"; done > "$RECORD/$n"
"""


def record(script: Path, work: Path, root: Path) -> list[list[str]]:
    """The verl launch lines ``script`` records, run from ``root`` (the folder holding ``examples/``), as from a
    clone of verl: some scripts find their configs from the working directory."""
    bin_dir, lines = work / "bin", work / "lines" / str(script).replace("/", "_")
    bin_dir.mkdir(parents=True, exist_ok=True)
    lines.mkdir(parents=True)
    for name in ("python3", "python", "torchrun", "hf", "ray", "nvidia-smi"):  # nvidia-smi: a GPU is there
        (bin_dir / name).write_text(STAND_IN)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD": str(lines), "HOME": str(work)}
    # what three scripts require set; ulimit -n, which this sandbox refuses, as a no-op
    env |= {"RAY_DATA_HOME": str(work), "INFER_BACKEND": "vllm", "LORA_ADAPTER_PATH": str(work / "adapter")}
    env |= {"BASH_FUNC_ulimit%%": "() { :\n}", "PYTHONPATH": ""}
    usage = ["8", str(work / "save")] if "Usage:" in script.read_text() else []  # SFT's <nproc_per_node> <save_path>
    try:
        subprocess.run(["bash", str(script), *usage], cwd=root, env=env, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:  # a script that waits for its cluster: what it launched so far
        pass
    found = [path.read_text().splitlines() for path in sorted(lines.iterdir(), key=lambda p: int(p.name))]
    return [line for line in found if any(word.startswith("verl.") for word in line)]  # not hf, get_model.py


def main(examples: Path, tree: Path, out: Path) -> None:
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"doctor-sweep-{os.getpid()}"
    results = []
    for script in sorted(examples.rglob("*.sh")):
        for line in record(script, work, examples.parent) or [[]]:
            env = {**os.environ, "PYTHONPATH": f"{tree.resolve()}:{REPO}"}
            # from where the script ran, as a user runs doctor (a relative Hydra searchpath resolves there); -P: not
            # the verl of that folder, but the tree on PYTHONPATH
            command = [sys.executable, "-P", "-m", "patchset", "doctor", "--json", "--", *line]
            where = examples.parent
            run = subprocess.run(command, env=env, capture_output=True, text=True, cwd=where) if line else None
            report = json.loads(run.stdout) if run and run.stdout else None
            error = run.stderr.strip() if run and not run.stdout else "no launch recorded"
            results.append(
                {
                    "script": str(script.relative_to(examples)),
                    "line": line,
                    "exit": run and run.returncode,
                    "report": report,
                    "error": error if report is None else None,
                }
            )
    out.write_text(json.dumps(results, indent=1))
    print(collections.Counter(result["exit"] for result in results))


def tally(vanilla: Path, patched: Path) -> None:
    """The record's table: per loss, the launches it changes with the split on vanilla, and those still changed
    patched; then each launch's exit codes."""
    before, after = json.loads(vanilla.read_text()), json.loads(patched.read_text())
    table: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for old, new in zip(before, after, strict=True):
        for row in (old["report"] or {}).get("losses", []):
            table[row["loss"]][0] += row["affected"]
        for row in (new["report"] or {}).get("losses", []):
            table[row["loss"]][1] += row["uncovered"]
    print("| loss | launches it changes on the vanilla release | still changed, patched |\n|---|---|---|")
    for loss, (used, left) in sorted(table.items()):
        print(f"| {loss} | {used} | {left} |")
    print("\n| script | launch | exit vanilla | exit patched | error |\n|---|---|---|---|---|")
    for old, new in zip(before, after, strict=True):
        entry = next((word for word in old["line"] if word.startswith("verl.")), "-")
        error = (old["error"] or "").removeprefix("error: ")[:90]
        print(f"| {old['script']} | {entry} | {old['exit']} | {new['exit']} | {error} |")


if __name__ == "__main__":
    if sys.argv[1] == "--tally":
        tally(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
