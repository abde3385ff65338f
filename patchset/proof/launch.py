"""The main process's end of one tree's run: start the tree's process (`side`), wait, read what its ranks wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from patchset.plumbing.bounded import Limit, hang_report
from patchset.plumbing.paths import REPO_ROOT
from patchset.proof.cases import Settings
from patchset.proof.trajectory import Run
from patchset.proof.trees import DefaultTrees, Source, check_modules
from patchset.proof.verdict import Measurement


@dataclass
class SideResult:
    """What one tree's ranks reported: rank 0's measurements and runs (``--steps``), its machine, and problems."""

    measurements: list[Measurement]
    runs: list[Run]
    environment: dict
    problems: list[str]
    hung: str = ""  # what hung, the limit and where its stacks are, when the run went past --timeout


def side_env(side: str, sources: Sequence[Source]) -> dict[str, str]:
    """The tree's process's environment: its trees first on ``PYTHONPATH``, and, on the vanilla side, no overlays."""
    env = dict(os.environ)
    trees = [str(source.tree) for source in sources if source.tree is not None]
    # "" would be the cwd; a relative entry is made absolute: the process starts in the repository root
    inherited = [os.path.abspath(entry) for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    env["PYTHONPATH"] = os.pathsep.join([*trees, *inherited])
    if side == "vanilla":
        env["PATCHSET_OVERLAYS"] = "0"  # this project's overlays, if installed here, must not fix the vanilla side
    return env


def measure(
    side: str, sources: Sequence[Source], settings: Settings, workdir: Path, defaults: DefaultTrees
) -> SideResult:
    """Run one tree's process and read what its ranks wrote; past ``settings.timeout``, end it and say what hung."""
    settings_file, result_file, log_file = (
        workdir / f"{side}.{suffix}" for suffix in ("settings.json", "result.json", "log")
    )
    settings_file.write_text(settings.to_json())
    command = [sys.executable, "-m", "patchset.proof.side", str(settings_file), str(result_file)]
    with log_file.open("w") as log:
        # a session of its own, so that a timeout ends the ranks it started too
        process = subprocess.Popen(
            command,
            env=side_env(side, sources),
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=settings.timeout)
        except subprocess.TimeoutExpired:
            limit = Limit(settings.timeout or 0.0, "--timeout SECONDS")
            hung = hang_report(f"the {side} tree's run", limit, process.pid, None)
            os.killpg(process.pid, signal.SIGKILL)  # what left the session's tree (a rank whose parent died) too
            process.wait()
            return SideResult([], [], {}, [hung], hung)
        except KeyboardInterrupt:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    if code != 0 or not result_file.exists():
        tail = "".join(log_file.read_text(errors="replace").splitlines(keepends=True)[-30:])
        problem = f"{side}: the tree's process exited with code {code}; last lines of its output:\n{tail}"
        return SideResult([], [], {}, [problem])
    ranks = json.loads(result_file.read_text())["ranks"]
    problems = [f"{side}, rank {rank}:\n{result['error']}" for rank, result in enumerate(ranks) if "error" in result]
    for result in ranks:
        problems += check_modules(side, sources, result.get("modules", {}), defaults)
    rows = [Measurement.from_dict(row) for row in ranks[0].get("measurements", [])]
    runs = [Run.from_dict(row) for row in ranks[0].get("trajectories", [])]
    return SideResult(rows, runs, ranks[0].get("environment", {}), problems)
