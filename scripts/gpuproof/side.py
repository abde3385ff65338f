"""One tree's process: ``python -m gpuproof.side SPEC RESULT``, with the tree first on ``PYTHONPATH``.

A process holds one verl, so each tree (vanilla, patched) is measured in a process of its own. This one builds the
model checkpoint if the other side has not (same seed, same weights), starts one rank per device (``spawn``: CUDA
cannot be forked; one rank runs in this process), and writes every rank's result to RESULT.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from engine_harness.model import save_model
from gpuproof.cases import MODELS
from gpuproof.rank import run_rank


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_side(spec: dict) -> dict:
    """Every rank's result (``{"ranks": [...]}``) for one tree; ranks that died without one say so."""
    model_path = Path(spec["model_path"])
    if not (model_path / "config.json").exists():
        save_model(MODELS[spec["model"]].shape, model_path)
    world_size = spec["world_size"]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    with tempfile.TemporaryDirectory(prefix="gpu-proof-ranks-") as workdir:
        if world_size == 1:
            run_rank(0, spec, workdir)
        else:
            import torch.multiprocessing as mp

            try:
                mp.start_processes(run_rank, args=(spec, workdir), nprocs=world_size, start_method="spawn", join=True)
            except mp.ProcessExitedException:
                pass  # a rank failed and the others were ended: its own result file says why
        ranks = []
        for rank in range(world_size):
            result_file = Path(workdir) / f"rank{rank}.json"
            if result_file.exists():
                ranks.append(json.loads(result_file.read_text()))
            else:
                ranks.append({"error": f"rank {rank} exited without a result"})
    return {"ranks": ranks}


def main(argv: Sequence[str] | None = None) -> int:
    spec_file, result_file = argv if argv is not None else sys.argv[1:]
    spec = json.loads(Path(spec_file).read_text())
    Path(result_file).write_text(json.dumps(run_side(spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
