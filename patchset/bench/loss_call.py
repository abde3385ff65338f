"""What the patches cost at run time: the median CPU time of one loss call (or mini-batch selection, `selection`)
and its host synchronisations (`syncs`), patched against vanilla.

Each tree pair is a child process (a process holds one verl); the children take turns, a block of calls each, so all
see the same machine load, and a second vanilla child gives the noise floor.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from engine_harness import LOSS_AGG_MODES
from patchset.bench.syncs import SYNC_METHODS, counting_syncs
from patchset.plumbing.errors import BadInput, ChildFailed
from patchset.plumbing.paths import REPO_ROOT

COMPONENTS = ("critic", "actor", "kl_cov", "clip_cov", "is_batch_norm")  # the last three: one mini-batch
LOSSES = {"critic": "critic", "actor": "trinity"}  # the harness's loss of each component
SELECTION_COMPONENTS = ("kl_cov", "clip_cov", "is_batch_norm")  # verl 0004, 0005: a mini-batch (selection.py)
SHAPES = (4, 16, 64)  # sequences per micro-batch
TIME_TARGET = 1.02
Case = tuple[str, str, int]  # component, mode, sequences
Trees = dict[str, Path]  # a child's trees: "verl" and "trinity"


def _micro_batch(component: str, sequences: int) -> tuple[dict[str, Any], Any]:
    """(model_output, data) as the engine hands them to the loss: one micro-batch of four on dp 2."""
    import torch
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    from engine_harness.sim import actor_inputs, make_rollout_batch, pack_model_output

    if component == "critic":
        batch = make_rollout_batch(sequences, seed=sequences, extra_fields=("values", "returns"))
        noise = torch.randn(batch["values"].shape, generator=torch.Generator().manual_seed(7))
        outputs = {"values": batch["values"] + 0.3 * noise}
    else:
        batch, outputs = actor_inputs(sequences, seed=sequences, noise_seed=7)
    data = left_right_2_no_padding(batch.clone())
    tokens = int(batch["response_mask"].sum())
    tu.assign_non_tensor(data, dp_size=2, batch_num_tokens=8 * tokens, global_batch_size=8 * sequences)
    model_output = {name: pack_model_output(data, tensor).requires_grad_(True) for name, tensor in outputs.items()}
    return model_output, data


def _case_call(component: str, mode: str, sequences: int) -> Callable[[], Any]:
    """One call of the case's loss (or mini-batch selection) on its inputs, inside a child."""
    if component in SELECTION_COMPONENTS:
        from patchset.bench.selection import selection_step

        return selection_step(component, sequences)
    from engine_harness.losses import loss_function

    loss = loss_function(LOSSES[component], mode, strategy="fsdp")
    model_output, data = _micro_batch(component, sequences)
    return lambda: loss(model_output=model_output, data=data, dp_group=None)


def _time_calls(call: Callable[[], Any], calls: int) -> list[float]:
    timings = []
    for _ in range(calls):
        started = time.thread_time()
        call()
        timings.append(time.thread_time() - started)
    return timings


def _child() -> int:
    """Serve timing requests, one JSON line each, on the real stdout (verl's prints go to stderr)."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import torch

    from engine_harness.sim import use_cpu_unpadding

    torch.set_num_threads(1)
    use_cpu_unpadding()
    import trinity
    import verl

    trees = {
        name: str(Path(module.__file__).resolve().parents[1]) for name, module in (("verl", verl), ("trinity", trinity))
    }

    def reply(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    reply({"trees": trees, "torch": torch.__version__})
    call: Callable[[], Any] | None = None
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "setup":
            call = _case_call(*request["case"])
            _time_calls(call, request["warmup"])
            with counting_syncs() as counts:
                call()
            reply({"syncs": dict(counts)})
        elif request["op"] == "time":
            assert call is not None, "time before setup"
            reply({"times": _time_calls(call, request["calls"])})
        else:
            break
    return 0


class _Child:
    """A child process holding one verl + Trinity tree pair."""

    def __init__(self, name: str, trees: Trees) -> None:
        self.name = name
        self.trees = {key: tree.resolve() for key, tree in trees.items()}
        python_path = os.pathsep.join(str(path) for path in trees.values())
        env = {**os.environ, "PYTHONPATH": python_path, "OMP_NUM_THREADS": "1"}
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        command = [sys.executable, "-m", __name__]
        # requests on stdin, replies on stdout (one JSON line each); what verl prints goes to the kept stderr
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": self._stderr}
        self._process = subprocess.Popen(command, env=env, cwd=REPO_ROOT, text=True, **pipes)
        hello = self._receive()
        for key, tree in self.trees.items():
            if Path(hello["trees"][key]) != tree:
                raise ChildFailed(f"{name}: the child imported {key} from {hello['trees'][key]}, not {tree}")
        self.torch_version: str = hello["torch"]

    def _receive(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self._stderr.seek(0)
            log = self._stderr.read().decode(errors="replace")[-4000:]
            raise ChildFailed(f"benchmark child {self.name} ({self.trees['verl']}) died:\n{log}")
        return json.loads(line)

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        return self._receive()

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.communicate(json.dumps({"op": "quit"}) + "\n", timeout=60)
        self._stderr.close()


@dataclass(frozen=True)
class Timing:
    """How each case is timed in each child."""

    blocks: int = 40  # alternating blocks per case and tree
    calls_per_block: int = 10  # timed calls per block
    warmup: int = 20  # untimed calls per case and tree first


def _measure(children: Sequence[_Child], timing: Timing) -> dict[Case, dict[str, dict[str, Any]]]:
    """Per case and child: the median call time and the synchronisation counts."""
    results: dict[Case, dict[str, dict[str, Any]]] = {}
    # KL-Cov's and Clip-Cov's choice does not depend on the loss_agg_mode: token-mean only
    modes = {c: ("token-mean",) if c in SELECTION_COMPONENTS else LOSS_AGG_MODES for c in COMPONENTS}
    cases = [(c, m, s) for c in COMPONENTS for m in modes[c] for s in SHAPES]
    for number, case in enumerate(cases, 1):
        print(f"* case {number}/{len(cases)}: {' '.join(map(str, case))}", file=sys.stderr, flush=True)
        syncs = {child.name: child.ask(op="setup", case=case, warmup=timing.warmup)["syncs"] for child in children}
        times: dict[str, list[float]] = {child.name: [] for child in children}
        for block in range(timing.blocks):
            # rotate who goes first, so that no child always runs right after another one
            for child in children[block % len(children) :] + children[: block % len(children)]:
                times[child.name] += child.ask(op="time", calls=timing.calls_per_block)["times"]
        results[case] = {
            child.name: {
                "median_s": statistics.median(times[child.name]),
                "syncs": syncs[child.name],
                "times_s": times[child.name],
            }
            for child in children
        }
    return results


def _added_syncs(component: str, vanilla: dict[str, int], patched: dict[str, int]) -> int:
    """Synchronisations the patch adds to one call: per method; for a mini-batch's selection the net count, since its
    one ``.item()`` (for k) replaces the per-micro-batch host copies and counts of the loss's own choice."""
    if component in SELECTION_COMPONENTS:
        return max(0, sum(patched.values()) - sum(vanilla.values()))
    return sum(max(0, patched[name] - vanilla[name]) for name in SYNC_METHODS)


def _report(results: dict[Case, dict[str, dict[str, Any]]], timing: Timing) -> bool:
    calls = timing.blocks * timing.calls_per_block
    print(
        f"* one loss call: median of {calls} calls per case and tree ({timing.blocks} alternating blocks of "
        f"{timing.calls_per_block}), CPU time of one torch thread"
    )
    header = f"{'component':<9} {'loss_agg_mode':<24} {'seqs':>4} {'vanilla us':>10} {'patched us':>10}"
    print(f"{header} {'patched/vanilla':>15} {'vanilla/vanilla':>15} {'syncs v/p':>9}")
    ratios, noise, fastest, extra_us = (defaultdict[str, list[float]](list) for _ in range(4))
    added = dict.fromkeys(COMPONENTS, 0)
    for (component, mode, sequences), row in results.items():
        vanilla, patched, again = row["vanilla"], row["patched"], row["vanilla-again"]
        ratio = patched["median_s"] / vanilla["median_s"]
        floor = again["median_s"] / vanilla["median_s"]
        ratios[component].append(ratio)
        noise[component].append(floor)
        fastest[component].append(min(patched["times_s"]) / min(vanilla["times_s"]))
        extra_us[component].append((patched["median_s"] - vanilla["median_s"]) * 1e6)
        added[component] += _added_syncs(component, vanilla["syncs"], patched["syncs"])
        syncs = f"{sum(vanilla['syncs'].values())}/{sum(patched['syncs'].values())}"
        print(
            f"{component:<9} {mode:<24} {sequences:>4} {vanilla['median_s'] * 1e6:>10.1f}"
            f" {patched['median_s'] * 1e6:>10.1f} {ratio:>15.3f} {floor:>15.3f} {syncs:>9}"
        )
    met = True
    print()
    for component in COMPONENTS:
        mean = statistics.geometric_mean(ratios[component])
        ok = mean <= TIME_TARGET
        met &= ok
        print(
            f"{component}: loss-call time patched / vanilla {mean:.3f} (geometric mean of the medians' ratios over"
            f" {len(ratios[component])} cases, worst {max(ratios[component]):.3f}; fastest calls"
            f" {statistics.geometric_mean(fastest[component]):.3f}; median extra time"
            f" {statistics.median(extra_us[component]):+.1f} us a call); noise floor vanilla / vanilla"
            f" {statistics.geometric_mean(noise[component]):.3f} (from {min(noise[component]):.3f} to"
            f" {max(noise[component]):.3f}); target <= {TIME_TARGET}: {'met' if ok else 'MISSED'}"
        )
    for component in COMPONENTS:
        ok = added[component] == 0
        met &= ok
        print(
            f"{component}: device-to-host synchronisations added by the patch: {added[component]} over all cases"
            f" (counted: {', '.join(SYNC_METHODS)}); target 0: {'met' if ok else 'MISSED'}"
        )
    return met


def run(vanilla: Trees, patched: Trees, timing: Timing, json_path: Path | None) -> bool:
    """Time every case in a child per tree pair (vanilla, patched, vanilla again), print it (and write ``json_path``);
    whether every target was met. A tree that is not there is bad input."""
    missing = [str(tree) for pair in (patched, vanilla) for tree in pair.values() if not tree.is_dir()]
    if missing:
        raise BadInput(f"no such tree: {', '.join(missing)} (run scripts/apply.sh first)")
    children: list[_Child] = []
    try:
        for name, pair in (("vanilla", vanilla), ("patched", patched), ("vanilla-again", vanilla)):
            children.append(_Child(name, pair))
        results, torch_version = _measure(children, timing), children[0].torch_version
    finally:
        for child in children:
            child.close()
    for name, pair in (("vanilla", vanilla), ("patched", patched)):
        print(f"* {name}: verl {pair['verl']}, trinity {pair['trinity']}")
    print(f"* torch {torch_version}, {os.cpu_count()} CPUs")
    met = _report(results, timing)
    if json_path is not None:
        rows = [{"case": list(case), **row} for case, row in results.items()]
        json_path.write_text(json.dumps(rows, indent=1) + "\n")
    return met


if __name__ == "__main__":  # a child `_Child` started: it serves requests on stdin until told to quit
    raise SystemExit(_child())
