"""One tree's process, ``python -m patchset.proof.side SETTINGS RESULT`` with the tree on ``PYTHONPATH``: a process
holds one verl. Its ranks, one per device, are children of a fork server (`patchset.plumbing.children`), never forks
of this process, which CUDA or OpenMP threads would make unsafe; a single rank runs in this process."""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from pathlib import Path

from engine_harness.model import save_model
from patchset.plumbing.children import run_children
from patchset.plumbing.errors import TimedOut
from patchset.proof.cases import MODELS, Settings
from patchset.proof.rank import run_rank

RANKS_LIMIT_S = 3600.0  # the ranks of one side, where the settings give no --timeout


def run_side(settings: Settings) -> dict:
    """Every rank's result (``{"ranks": [...]}``) for one tree; ranks that died without one say so."""
    if not (settings.model_path / "config.json").exists():
        save_model(MODELS[settings.model].shape, settings.model_path)
    world_size = settings.world_size
    with socket.socket() as probe:  # a free port for the ranks' rendezvous
        probe.bind(("127.0.0.1", 0))
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(probe.getsockname()[1]))
    with tempfile.TemporaryDirectory(prefix="gpu-proof-ranks-") as workdir:
        if world_size == 1:
            run_rank(0, settings, workdir)
        else:
            limit = settings.timeout or RANKS_LIMIT_S
            try:  # a rank that fails ends the others: its own result file says why
                run_children(
                    run_rank, [(rank, settings, workdir) for rank in range(world_size)], limit, "gpu_proof rank"
                )
            except TimedOut as hung:
                print(f"error: {hung}", file=sys.stderr, flush=True)
        files = [Path(workdir) / f"rank{rank}.json" for rank in range(world_size)]
        ranks = [
            json.loads(file.read_text()) if file.exists() else {"error": f"rank {rank} exited without a result"}
            for rank, file in enumerate(files)
        ]
    return {"ranks": ranks}


if __name__ == "__main__":  # `launch` starts it; its errors go to the tree's log whole
    settings_file, result_file = map(Path, sys.argv[1:])
    result_file.write_text(json.dumps(run_side(Settings.from_json(settings_file.read_text()))))
