"""What the no-grad forward before a later update costs (verl 0004, 0005): ``engine.infer_batch`` over the
mini-batch, against the ``train_batch`` it comes before, on one gloo rank of verl's real FSDP2 engine.

KL-Cov's and Clip-Cov's selection, and bypass mode's IS batch mean, need the current policy's log-probs of the whole
mini-batch before its first backward pass; where ``old_log_probs`` are not those, the patched worker runs this forward
first. The peak resident memory's growth (``ru_maxrss``) is 0 while the forward's peak stays under the step's.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine_harness.model import TINY, ModelShape
from patchset.plumbing.errors import ChildFailed
from patchset.plumbing.paths import REPO_ROOT

# the regression tests' model, and one where the model's arithmetic outweighs the engine's bookkeeping on a CPU
SHAPES = {"tiny": TINY, "small": ModelShape(4, 256, 704, 8, 4, 2048)}
LOSS = "ppo"


@dataclass(frozen=True)
class PrePassCost:
    """One shape's figures: median CPU seconds of a training step and of a pre-pass, syncs and memory of the latter."""

    shape: str
    sequences: int
    micro_batches: int
    train_s: float
    pre_pass_s: float
    syncs: dict[str, int]
    peak_rss_growth_kib: int

    @property
    def ratio(self) -> float:
        return self.pre_pass_s / self.train_s


def _pre_pass(engine: Any, data: Any) -> float:
    """The patched worker's pre-pass, timed: ``infer_batch`` in train mode, the RNG state restored after it."""
    import torch

    with engine.train_mode(), torch.random.fork_rng(devices=[]):
        started = time.process_time()
        engine.infer_batch(data, loss_function=None)
        return time.process_time() - started


def _costs(
    engine: Any, batch: Any, loss: Any, shape: str, sequences: int, micro_batches: int, repeats: int
) -> PrePassCost:
    """One split's figures, on an engine built and a batch made."""
    from engine_harness.data import step_data
    from engine_harness.engine import train_step
    from engine_harness.sim import Split
    from patchset.bench.syncs import counting_syncs

    def data() -> Any:  # fresh each call: the engine adds its own fields to what it is given
        return step_data(batch, 0, 1, Split(micro_batches), LOSS)

    train_step(engine, data(), loss)  # warm-up, and the training step's peak memory
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with counting_syncs() as syncs:
        _pre_pass(engine, data())
    train, pre_pass = [], []
    for _ in range(repeats):
        train.append(train_step(engine, data(), loss).seconds)
        pre_pass.append(_pre_pass(engine, data()))
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    return PrePassCost(
        shape, sequences, micro_batches, statistics.median(train), statistics.median(pre_pass), dict(syncs), growth
    )


def measure(verl_tree: Path, shape: str, sequences: int, splits: list[int], repeats: int) -> list[PrePassCost]:
    """Each split's figures, from a child process (`main`) that imports verl from ``verl_tree`` (checked)."""
    env = {**os.environ, "PYTHONPATH": str(verl_tree), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", __name__, shape, str(sequences), ",".join(map(str, splits)), str(repeats)]
    done = subprocess.run(command, env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ChildFailed(f"the pre-pass benchmark ({verl_tree}) exited {done.returncode}:\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["verl"]) != verl_tree.resolve():
        raise ChildFailed(f"the pre-pass benchmark imported verl from {result['verl']}, not {verl_tree}")
    return [PrePassCost(**cost) for cost in result["costs"]]


def report(costs: list[PrePassCost]) -> str:
    lines = [
        f"{'model':<6} {'sequences':>9} {'micro-batches':>13} {'train_batch ms':>14} {'pre-pass ms':>11} "
        f"{'pre-pass / step':>15} {'syncs':>5} {'peak RSS +KiB':>13}"
    ]
    for cost in costs:
        lines.append(
            f"{cost.shape:<6} {cost.sequences:>9} {cost.micro_batches:>13} {cost.train_s * 1e3:>14.1f} "
            f"{cost.pre_pass_s * 1e3:>11.1f} {cost.ratio:>15.3f} {sum(cost.syncs.values()):>5} "
            f"{cost.peak_rss_growth_kib:>13}"
        )
    return "\n".join(lines)


def run(verl_tree: Path, repeats: int, json_path: Path | None) -> int:
    """Measure and print the pre-pass of each of `SHAPES` with the verl of ``verl_tree`` (and write ``json_path``)."""
    print(f"* the pre-pass: verl {verl_tree}; median CPU time of {repeats} alternating calls each", flush=True)
    costs = []
    for shape in SHAPES:
        costs += measure(verl_tree, shape, sequences=16, splits=[1, 4], repeats=repeats)
        print(f"* measured the {shape} model", flush=True)
    print(report(costs))
    if json_path is not None:
        json_path.write_text(json.dumps([{**asdict(cost), "ratio": cost.ratio} for cost in costs], indent=1) + "\n")
    return 0


def main(argv: list[str]) -> int:
    """The child `measure` starts, with the verl tree on the path: ``python -m patchset.bench.pre_pass SHAPE SEQUENCES
    K[,K...] REPEATS``; prints one JSON line."""
    import torch
    import verl

    from engine_harness.adapt import freeze_collector
    from engine_harness.data import rollout_global_batch
    from engine_harness.engine import build_engine
    from engine_harness.losses import loss_function
    from engine_harness.model import save_model
    from engine_harness.sim import use_cpu_unpadding

    shape_name, sequences, splits, repeats = argv[0], int(argv[1]), [int(k) for k in argv[2].split(",")], int(argv[3])
    torch.set_num_threads(1)
    shape = SHAPES[shape_name]
    with tempfile.TemporaryDirectory(prefix="patchset-bench-pre-pass-") as workdir:
        rendezvous = f"file://{workdir}/rendezvous"
        torch.distributed.init_process_group("gloo", init_method=rendezvous, rank=0, world_size=1)
        try:
            use_cpu_unpadding()
            save_model(shape, Path(workdir) / "model")
            engine = build_engine(LOSS, Path(workdir) / "model")
            freeze_collector()
            batch = rollout_global_batch(shape.vocab_size, sequences)
            loss = loss_function(LOSS, "token-mean")
            costs = [_costs(engine, batch, loss, shape_name, sequences, k, repeats) for k in splits]
        finally:
            torch.distributed.destroy_process_group()
    tree = str(Path(verl.__file__).resolve().parents[1])
    print(json.dumps({"verl": tree, "costs": [asdict(cost) for cost in costs]}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
