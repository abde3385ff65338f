"""`scripts/gpu_proof.py` (`patchset.proof`) without a GPU or an engine: its verdicts, its report and its
refusals.

Invariants: a patched tree passes only when every split's grad_norm is within the precision's tolerance of one
micro-batch's (fp32 1e-4, bf16 2**-8); a vanilla tree passes only when it shows its case's bug (about K times, or
for distillation a difference); a split the engine did not make fails; bad input exits 2 with one line naming the
flag and the value, before any torch import or process start. The engine runs themselves are tested by
tests/regression/test_gpu_proof_smoke.py on the real trees.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from patchset.cli import main
from patchset.plumbing.paths import REPO_ROOT
from patchset.proof import prove
from patchset.proof.cases import CASES, MODELS, Settings, global_batch_size
from patchset.proof.report import step_time_lines, table, trajectory_table, verdict_lines
from patchset.proof.trajectory import Run, Step, judge_trajectories
from patchset.proof.trees import DefaultTrees, Source, check_modules
from patchset.proof.verdict import TOLERANCE, Measurement, judge


def _rows(case: str, ratios: dict[tuple[str, int], float], precision: str = "fp32", seconds: float = 1.0):
    rows = [Measurement(case, precision, "fixed", 1, 0.5, 1, (seconds,))]
    rows += [Measurement(case, precision, s, k, 0.5 * r, k, (seconds,)) for (s, k), r in ratios.items()]
    return rows


@pytest.mark.parametrize(
    ("precision", "drift", "passed"),
    [("fp32", 5e-5, True), ("fp32", 5e-4, False), ("bf16", 2.3e-4, True), ("bf16", 1e-2, False)],
)
def test_patched_tree_passes_only_within_the_precision_tolerance(precision, drift, passed):
    rows = _rows("critic", {("fixed", 2): 1 + drift, ("dynamic", 4): 1 - drift / 2}, precision)
    verdict = judge("patched", CASES["critic"], precision, rows)
    assert verdict.passed is passed, verdict.detail
    assert f"{TOLERANCE[precision]:.1e}" in verdict.detail


@pytest.mark.parametrize(
    ("case", "ratios", "passed"),
    [
        ("critic", {("fixed", 2): 2.0, ("fixed", 4): 4.0, ("dynamic", 4): 4.14}, True),
        ("trinity", {("fixed", 2): 2.0, ("fixed", 4): 1.0}, False),  # fixed at K=4: not the vanilla tree
        ("geo_mean", {("dynamic", 2): 1.0}, False),
        ("ppo", {("fixed", 2): 1.0, ("fixed", 4): 1.0}, True),  # already split-invariant upstream
        ("ppo", {("fixed", 2): 2.0}, False),
        ("distillation", {("fixed", 2): 1.6, ("dynamic", 4): 2.3}, True),
        ("distillation", {("fixed", 2): 1.6, ("dynamic", 4): 1.02}, False),
        # another choice moves the grad_norm a little, but beyond reassociation at every split
        ("kl_cov", {("fixed", 2): 1.0017, ("dynamic", 4): 1.0078}, True),
        ("is_norm", {("fixed", 2): 0.9989, ("dynamic", 2): 1.00004}, False),
    ],
)
def test_vanilla_tree_passes_only_when_it_shows_its_case_bug(case, ratios, passed):
    verdict = judge("vanilla", CASES[case], "fp32", _rows(case, ratios))
    assert verdict.passed is passed, verdict.detail


def test_another_choice_in_one_bf16_step_is_reported_not_judged():
    """bf16's tolerance is above what another choice moves one step's grad_norm: a training run judges it."""
    vanilla = _rows("kl_cov", {("fixed", 2): 0.9981, ("fixed", 4): 1.0086}, "bf16")
    patched = _rows("kl_cov", {("fixed", 2): 1.00007, ("fixed", 4): 0.99998}, "bf16")

    assert judge("vanilla", CASES["kl_cov"], "bf16", vanilla).passed is None
    assert judge("patched", CASES["kl_cov"], "bf16", patched).passed is True
    assert judge("vanilla", CASES["kl_cov"], "fp32", _rows("kl_cov", {("fixed", 2): 1.00007})).passed is False


def test_a_split_the_engine_did_not_make_fails():
    rows = _rows("critic", {("fixed", 2): 1.0})
    rows[1] = Measurement("critic", "fp32", "fixed", 2, 0.5, 3, (1.0,))
    verdict = judge("patched", CASES["critic"], "fp32", rows)
    assert not verdict.passed and "made 3" in verdict.detail


def test_no_split_measured_fails():
    assert not judge("patched", CASES["critic"], "fp32", _rows("critic", {})).passed


def test_report_prints_ratios_verdicts_and_the_step_time_ratio():
    results = {
        "vanilla": _rows("critic", {("fixed", 2): 2.0}, seconds=2.0),
        "patched": _rows("critic", {("fixed", 2): 1.0}, seconds=2.2),
    }
    lines = table(results, ["critic"], ["fp32"])
    assert lines[0].split()[:4] == ["case", "precision", "tree", "K=1"]
    assert lines[1].split()[2:5] == ["vanilla", "0.5", "2.0000"]
    assert lines[2].split()[2:5] == ["patched", "0.5", "1.0000000"]
    assert step_time_lines(results, ["critic"], ["fp32"]) == [
        "step time patched / vanilla: critic fp32: 1.100 (2.200 s / 2.000 s, median of every timed step)"
    ]
    verdict = judge("patched", CASES["critic"], "fp32", results["patched"])
    assert verdict_lines([verdict])[0].startswith("PASS  patched  fp32  verl critic value_loss")


def test_step_time_ratio_counts_the_patched_workers_pre_pass():
    """A patched worker's pre-pass forward is part of every update it runs: the ratio users read includes it."""
    vanilla = [Measurement("kl_cov", "fp32", "fixed", k, 0.5, k, (2.0,)) for k in (1, 2)]
    patched = [Measurement("kl_cov", "fp32", "fixed", k, 0.5, k, (2.4,), (0.4,)) for k in (1, 2)]
    assert step_time_lines({"vanilla": vanilla, "patched": patched}, ["kl_cov"], ["fp32"]) == [
        "step time patched / vanilla: kl_cov fp32: 1.200 (2.400 s / 2.000 s, median of every timed step; patched: "
        "the worker's pre-pass included, median 0.400 s of it)"
    ]
    row = {"case": "kl_cov", "precision": "fp32", "split": "fixed", "micro_batches": 1, "grad_norm": 0.5, "made": 1}
    assert Measurement.from_dict({**row, "seconds": [2.4], "pre_pass": [0.4]}) == patched[0]


def test_train_step_times_the_pre_pass_in_train_mode():
    """`train_step` runs ``before`` (the worker's pre-pass) in the engine's train mode, before ``train_batch``, and
    counts its time in the step's."""
    from contextlib import contextmanager

    from engine_harness.engine import train_step

    calls = []

    class Engine:
        mode = None

        @contextmanager
        def train_mode(self):
            self.mode = "train"
            yield
            self.mode = None

        def train_batch(self, data, loss_function):
            calls.append(("train_batch", self.mode))
            return {"metrics": {"grad_norm": 1.0}, "loss": [0.5]}

    def before():
        calls.append(("before", engine.mode))
        started = time.process_time()
        while time.process_time() - started < 0.02:  # CPU time, as `step_clock` counts on CPU
            pass

    engine = Engine()
    step = train_step(engine, {}, None, before=before)
    assert calls == [("before", "train"), ("train_batch", "train")]
    assert step.seconds >= step.pre_pass >= 0.02
    assert train_step(engine, {}, None).pre_pass == 0.0


def test_global_batch_cuts_evenly_on_every_rank():
    for world_size in (1, 2, 3, 8):
        rows = global_batch_size(MODELS["tiny"], world_size)
        assert rows >= MODELS["tiny"].sequences and rows % (4 * world_size) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--vanilla", "/nonexistent/verl"], "--vanilla /nonexistent/verl: not a verl tree"),
        (
            ["--vanilla", "installed", "--patched", "installed", "--trinity-patched", "/nonexistent/t"],
            "--trinity-patched /nonexistent/t: not a trinity tree",
        ),
        (["--vanilla", "installed", "--patched", "installed", "--cases", "critic,sft"], "--cases 'critic,sft'"),
        (["--sides", "patched", "--patched", "installed", "--micro-batches", "2,4"], "--micro-batches '2,4'"),
        (["--sides", "patched", "--patched", "installed", "--precision", "fp16"], "--precision 'fp16'"),
        (["--sides", "both"], "--sides 'both'"),
        (["--sides", "patched", "--patched", "installed", "--repeats", "0"], "--repeats 0"),
        (["--sides", "patched", "--patched", "installed", "--steps", "0"], "--steps 0"),
        (["--sides", "patched", "--patched", "installed", "--clip", "1.0,none"], "--clip '1.0,none'"),
        (["--sides", "patched", "--patched", "installed", "--clip", "-1"], "--clip '-1'"),
        (["--sides", "patched", "--patched", "installed", "--lr", "0"], "--lr 0.0"),
        (["--sides", "patched", "--patched", "installed", "--sp", "0"], "--sp 0: at least 1"),
        (
            ["--sides", "patched", "--patched", "installed", "--world-size", "3", "--sp", "2"],
            "--sp 2: the world size 3 does not divide into groups of 2 ranks",
        ),
        (
            ["--sides", "patched", "--patched", "installed", "--world-size", "8", "--sp", "8"],
            "--sp 8: model tiny has 4 attention heads",
        ),
        (
            ["--sides", "patched", "--patched", "installed", "--world-size", "2", "--sp", "2", "--attention", "sdpa"],
            "--attention sdpa with --sp 2",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(argv, message, capsys, monkeypatch, tmp_path):
    """Refused before torch is imported or a process starts (an empty cache: no default trees, as on a fresh
    clone)."""
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "empty-cache"))
    assert main(["proof", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err, err


def test_the_default_trees_are_read_when_the_command_runs_not_at_import(monkeypatch, tmp_path):
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "elsewhere"))
    trees = DefaultTrees.from_workspace(os.environ).trees
    assert trees and all(tree.is_relative_to(tmp_path / "elsewhere") for tree in trees.values())


def test_the_settings_reach_each_trees_process_as_they_were_planned(tmp_path):
    settings = Settings(
        cases=("critic", "trinity"),
        precisions=("fp32", "bf16"),
        model="tiny",
        model_path=tmp_path / "model",
        world_size=4,
        device="cuda",
        attention="ulysses_sdpa",
        micro_batches=(1, 2, 4),
        splits=("fixed", "dynamic"),
        repeats=3,
        steps=20,
        clips=(1.0, None),
        lr=1e-4,
        sp=2,
        timeout=60.0,
    )
    assert Settings.from_json(settings.to_json()) == settings


def test_the_main_process_imports_neither_torch_nor_verl():
    """Only the trees' processes do: the main process refuses bad input, and starts them, without either."""
    check = "import sys, patchset.cli.proof; print(sorted({'torch', 'verl', 'trinity'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_help_names_every_case_and_the_exit_codes(capsys):
    assert main(["proof", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in CASES) and "exit codes: 0" in out and "--world-size" in out and "--sp" in out


def test_sequence_parallelism_picks_the_attention_ulysses_runs_in():
    """sdpa without sp; with sp, the flash-attention entry around a pure-torch kernel, unless flash_attn is asked."""
    tiny = MODELS["tiny"]
    assert prove.sequence_parallel(1, None, tiny, None) == "sdpa"
    assert prove.sequence_parallel(2, 4, tiny, None) == prove.ULYSSES_SDPA == "ulysses_sdpa"
    assert prove.sequence_parallel(2, None, tiny, "flash_attention_2") == "flash_attention_2"


def test_a_module_from_outside_the_tree_claimed_is_reported(tmp_path):
    defaults = DefaultTrees.from_workspace(os.environ)
    tree, elsewhere = tmp_path / "verl-tree", tmp_path / "site-packages"
    sources = [Source("verl", tree)]
    inside = {"verl": str(tree / "verl" / "__init__.py"), "verl.workers.utils.losses": str(tree / "verl" / "l.py")}
    assert check_modules("patched", sources, inside, defaults) == []
    stray = {**inside, "verl.workers.utils.losses": str(elsewhere / "verl" / "l.py")}
    assert check_modules("patched", sources, stray, defaults) == [
        f"patched: verl.workers.utils.losses came from {elsewhere / 'verl' / 'l.py'}, not from {tree}"
    ]
    unclaimed = {**inside, "trinity": str(elsewhere / "trinity" / "__init__.py")}
    assert check_modules("patched", sources, unclaimed, defaults) == [
        "patched: trinity imported, but no trinity was given"
    ]


def test_an_installed_package_must_not_come_from_a_pinned_tree():
    defaults = DefaultTrees.from_workspace(os.environ)
    sources = [Source("verl", None)]
    pinned = defaults.trees["verl", "patched"]
    modules = {"verl": str(pinned / "verl" / "__init__.py")}
    (problem,) = check_modules("patched", sources, modules, defaults)
    assert "not from the installed verl" in problem


def _runs(distances: dict[tuple[str, int], float], clip: float | None = 1.0, grad_norm: float = 0.5) -> list[Run]:
    """A case's runs of three steps: the reference, the shuffled floor (1e-6) and ``distances``."""
    every = {("fixed", 1): 0.0, ("shuffled", 1): 1e-6, **distances}
    return [
        Run(
            "critic",
            "fp32",
            clip,
            split,
            k,
            tuple(Step(1.0, grad_norm * k, k if split != "dynamic" else 1) for _ in range(3)),
            d,
        )
        for (split, k), d in every.items()
    ]


@pytest.mark.parametrize(
    ("side", "distances", "clip", "passed"),
    [
        ("patched", {("fixed", 2): 5e-6, ("dynamic", 4): 9e-6}, 1.0, True),  # within 10x the floor
        ("patched", {("fixed", 2): 5e-6, ("dynamic", 4): 3e-5}, 1.0, False),
        ("patched", {("fixed", 2): 3e-5}, None, False),  # patched is judged without clipping too
        ("vanilla", {("fixed", 2): 0.09, ("dynamic", 4): 0.3}, 1.0, True),
        ("vanilla", {("fixed", 2): 5e-6}, 1.0, False),  # a vanilla run that ends where K=1 did shows no bug
        ("vanilla", {("fixed", 2): 5e-6}, None, None),  # without clipping: reported, not judged
    ],
)
def test_training_runs_are_judged_against_the_shuffled_floor(side, distances, clip, passed):
    verdict = judge_trajectories(side, CASES["critic"], "fp32", clip, _runs(distances, clip))
    assert verdict.passed is passed, verdict.detail


def test_another_choice_over_a_bf16_run_is_reported_not_judged():
    """bf16's floor over a run is about what another choice moves it: vanilla kl_cov is judged in fp32 only."""
    from dataclasses import replace

    def runs(precision: str) -> list[Run]:
        return [replace(run, case="kl_cov", precision=precision) for run in _runs({("fixed", 2): 5e-6})]

    assert judge_trajectories("vanilla", CASES["kl_cov"], "bf16", 1.0, runs("bf16")).passed is None
    assert judge_trajectories("vanilla", CASES["kl_cov"], "fp32", 1.0, runs("fp32")).passed is False
    assert judge_trajectories("patched", CASES["kl_cov"], "bf16", 1.0, runs("bf16")).passed is True


def test_training_runs_without_the_floor_or_with_a_wrong_count_fail():
    runs = [run for run in _runs({("fixed", 2): 0.0}) if run.split != "shuffled"]
    assert judge_trajectories("patched", CASES["critic"], "fp32", 1.0, runs).passed is False
    wrong = [Run("critic", "fp32", 1.0, "fixed", 2, (Step(1.0, 0.5, 3),), 0.0), *_runs({})]
    verdict = judge_trajectories("patched", CASES["critic"], "fp32", 1.0, wrong)
    assert verdict.passed is False and "made 3" in verdict.detail


def test_training_table_gives_distances_and_the_clipped_share():
    runs = _runs({("fixed", 4): 0.2}, grad_norm=0.6)  # K=1 0.6, K=4 2.4: K=4 clipped at 1.0
    (header, line) = trajectory_table({"vanilla": runs}, ["critic"], ["fp32"])
    assert "K=4" in header and "K=1 shuffled" in header
    assert "2.00e-01" in line and "0% / 100%" in line
