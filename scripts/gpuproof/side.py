"""One tree's process: ``python -m gpuproof.side SPEC RESULT``, with the tree first on ``PYTHONPATH``.

A process holds one verl, so each tree (vanilla, patched) is measured in a process of its own. This one builds the
model checkpoint if the other side has not (same seed, same weights), starts one rank per device (children of a fork
server, `patchset.plumbing.children`: never a fork of this process, which CUDA or OpenMP threads would make unsafe;
one rank runs in this process), and writes every rank's result to RESULT. The ranks are waited for within the
side's own limit (``--timeout``), and ended, their stacks printed, past it.
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
from patchset.plumbing.children import run_children
from patchset.plumbing.errors import TimedOut

RANKS_LIMIT_S = 3600.0  # the ranks of one side, where the spec does not give the script's --timeout


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
            limit = spec.get("timeout") or RANKS_LIMIT_S
            try:  # a rank that fails ends the others: its own result file says why
                run_children(run_rank, [(rank, spec, workdir) for rank in range(world_size)], limit, "gpu_proof rank")
            except TimedOut as hung:
                print(f"error: {hung}", file=sys.stderr, flush=True)
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
