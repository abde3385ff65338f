"""``patchset doctor`` answers each kind of run right, on the vanilla and on the patched verl 0.8.0 alike: a loss
that depends on the split and is fixed (exit 0 patched, 6 vanilla), one the fix does not cover (KL-Cov on the
Megatron engine: 6 on both, NOT COVERED where the series is applied), a run that does not depend on the split (0 on
both), and a config that does not compose (7 on both, the trainer's own error in one line); and a Trinity-RFT YAML
(its policy loss: 6 on vanilla trinity-rft 0.6.0, 0 patched), on the engine path and beside verl 0.7.1 on its legacy
path; and verl 0.7.x by its release series and worker path. Each runs the command as a user does, with the
upstreams imported from the trees on PYTHONPATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchset.testenv import suite_forks
from patchset.upstreams.fetch import resolve_cache

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = resolve_cache(None, os.environ, REPO_ROOT).root
TREES = {"vanilla": CACHE / "upstreams", "patched": CACHE / "patched"}
PPO = ["python3", "-m", "verl.trainer.main_ppo", "trainer.n_gpus_per_node=8"]
CRITIC = [*PPO, "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=2"]
MEGATRON_KL_COV = [
    *PPO,
    "--config-name=ppo_megatron_trainer",
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
]
GRPO = [*PPO, "algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"]
NO_COMPOSE = [*PPO, "actor_rollout_ref.actor.no_such_key=1"]


TRINITY_YAML = """\
project: doctor-test
name: grpo
algorithm: {algorithm_type: grpo, repeat_times: 8}
model: {model_path: Qwen/Qwen2.5-1.5B-Instruct, max_response_tokens: 1024, max_model_len: 2048}
cluster: {node_num: 1, gpu_per_node: 8}
buffer:
  batch_size: 32
  explorer_input:
    taskset: {name: gsm8k, storage_type: file, path: openai/gsm8k}
  trainer_input:
    experience_buffer: {name: buffer, storage_type: queue}
explorer:
  rollout_model: {engine_num: 4, tensor_parallel_size: 1}
trainer: {trainer_type: verl, use_dynamic_bsz: true, max_token_len_per_gpu: 4096}
"""


def doctor(tree: str, launch: list[str], first: Path | None = None, verl: str = "") -> subprocess.CompletedProcess[str]:
    """``doctor --json`` on ``launch``, the ``tree`` ("vanilla", "patched") upstreams on PYTHONPATH after ``first``;
    with ``verl`` ("0.7.1"), that vanilla release instead of the tree's verl 0.8.0."""
    trees = [TREES[tree] / "verl-0.8.0" if not verl else TREES["vanilla"] / f"verl-{verl}"]
    trees.append(TREES[tree] / "trinity-rft-0.6.0")
    if not all(path.is_dir() for path in trees):
        pytest.skip(f"no {' and '.join(path.name for path in trees)} here (scripts/apply.sh makes them)")
    path = [*([first] if first else []), *trees, REPO_ROOT]
    # no bytecode in the cache's trees, which other steps share: one with a __pycache__ is rebuilt ("local changes")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, path)), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "patchset", "doctor", "--json", "--", *launch]
    if first is not None and (first / "sitecustomize.py").exists():  # start-up files, which a fork of the server skips
        env.pop(suite_forks.SOCKET_VARIABLE, None)
    # elsewhere forked by the test command's suite fork server (a fresh interpreter loading Trinity's config: 8 CPU-s)
    return suite_forks.run_captured(command, REPO_ROOT, env, errors_apart=True, timeout=120)


@pytest.mark.parametrize(
    ("launch", "tree", "exit_code", "fix"),
    [
        (CRITIC, "vanilla", 6, {"critic `value_loss`": "NOT FIXED here"}),
        (CRITIC, "patched", 0, {"critic `value_loss`": "patched tree"}),
        (MEGATRON_KL_COV, "vanilla", 6, {"KL-Cov": "NOT FIXED here"}),
        (MEGATRON_KL_COV, "patched", 6, {"KL-Cov": "NOT COVERED"}),
        (GRPO, "vanilla", 0, {"actor policy loss `vanilla`": "not needed"}),
        (GRPO, "patched", 0, {"actor policy loss `vanilla`": "not needed"}),
    ],
    ids=["critic-vanilla", "critic-patched", "megatron-kl-cov-vanilla", "megatron-kl-cov-patched", "grpo-v", "grpo-p"],
)
def test_doctor_answers_each_kind_of_run(launch: list[str], tree: str, exit_code: int, fix: dict[str, str]) -> None:
    result = doctor(tree, launch)
    assert result.returncode == exit_code, result.stderr
    report = json.loads(result.stdout)
    answers = {row["loss"]: row for row in report["losses"]}
    for loss, state in fix.items():
        row = next(row for name, row in answers.items() if name.startswith(loss))
        assert row["fix"].startswith(state)
    if launch is CRITIC:  # 256 prompts over 8 ranks, 2 a micro-batch
        assert answers["critic `value_loss`"]["effect"].startswith("x 16 ")
    assert report["depends_on_split"] is (exit_code == 6)


def test_doctor_reads_a_ppo_run_that_composes_a_config_of_its_own(tmp_path: Path) -> None:
    """A PPO launch with ``--config-path``/``--config-name`` of the user's (as verl's multi-turn examples do, their
    config extending ``ppo_trainer``) is judged as PPO: its critic x 16. It once read as SFT, not affected."""
    (tmp_path / "my_ppo.yaml").write_text(
        f"hydra:\n  searchpath:\n    - file://{TREES['vanilla'] / 'verl-0.8.0' / 'verl' / 'trainer' / 'config'}\n"
        "defaults:\n  - ppo_trainer\n  - _self_\n"
    )
    result = doctor("vanilla", [*CRITIC, f"--config-path={tmp_path}", "--config-name=my_ppo"])
    assert result.returncode == 6, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["config"] == "my_ppo"
    assert {row["loss"]: row["effect"][:5] for row in report["losses"]}["critic `value_loss`"] == "x 16 "


@pytest.mark.parametrize(
    "options", [["-cd", "{dir}", "-cn", "mine"], ["--cfg", "job", "-p", "critic"]], ids=["config-dir", "cfg-job"]
)
def test_doctor_reads_hydras_options_whose_value_is_the_next_word(options: list[str], tmp_path: Path) -> None:
    """``-cd DIR`` puts DIR on the search path, as ``@hydra.main`` does; ``--cfg job`` is no override. Both once
    failed to compose (exit 7)."""
    (tmp_path / "mine.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\n")
    result = doctor("vanilla", [*CRITIC, *(option.format(dir=tmp_path) for option in options)])
    assert result.returncode == 6, result.stderr[-2000:]
    assert json.loads(result.stdout)["config"] == ("mine" if "-cn" in options else "ppo_trainer")


@pytest.mark.parametrize("tree", ["vanilla", "patched"])
def test_doctor_config_that_does_not_compose_gives_hydras_error(tree: str) -> None:
    result = doctor(tree, NO_COMPOSE)
    assert result.returncode == 7
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "no_such_key" in result.stderr


@pytest.mark.parametrize(
    ("tree", "exit_code", "fix"), [("vanilla", 6, "NOT FIXED here"), ("patched", 0, "patched tree")]
)
def test_doctor_reads_a_trinity_yaml_and_makes_no_folder_in_its_checkpoint_root(
    tree: str, exit_code: int, fix: str, tmp_path: Path
) -> None:
    """Trinity's validators make the job's checkpoint, monitor and buffer folders: doctor only reads the run."""
    config = tmp_path / "grpo.yaml"
    config.write_text(f"{TRINITY_YAML}checkpoint_root_dir: {tmp_path / 'checkpoints'}\n")
    result = doctor(tree, [str(config)])
    assert result.returncode == exit_code, result.stderr[-2000:]
    assert not (tmp_path / "checkpoints").exists()
    (row,) = json.loads(result.stdout)["losses"]
    assert row["patch"] == "trinity 0001" and row["fix"] == fix
    # 32 tasks x 8 = 256 experiences on 4 trainer GPUs, 64 a rank of at most 2048 tokens in 4096-token micro-batches
    assert row["effect"].startswith("varies with response length, up to x 32 ")


@pytest.mark.parametrize(("launch", "said"), [([], "the verl launch line"), (["none.yaml"], "none.yaml: no such file")])
def test_doctor_without_a_run_to_read_says_what_it_needs(launch: list[str], said: str) -> None:
    result = doctor("vanilla", launch)
    assert result.returncode == 2 and said in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("run", ["verl", "trinity"])
def test_doctor_run_by_a_python_that_cannot_compose_says_so_in_one_line(run: str, tmp_path: Path) -> None:
    """A Python other than the training environment's (OmegaConf missing, as stood in for here) is bad input, exit 2,
    not an internal error."""
    (tmp_path / "omegaconf").mkdir()
    (tmp_path / "omegaconf" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'omegaconf'\")\n")
    (tmp_path / "grpo.yaml").write_text(TRINITY_YAML)
    result = doctor("vanilla", CRITIC if run == "verl" else [str(tmp_path / "grpo.yaml")], first=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.count("\n") == 1 and "'omegaconf': run doctor with the training environment's" in result.stderr


def test_doctor_never_starts_ray_for_a_trinity_yaml_without_a_cluster(tmp_path: Path) -> None:
    """Trinity's validators would start Ray to count the GPUs: doctor asks for --cluster instead."""
    config = tmp_path / "grpo.yaml"
    config.write_text(TRINITY_YAML.replace("cluster: {node_num: 1, gpu_per_node: 8}\n", ""))
    result = doctor("vanilla", [str(config)])
    assert result.returncode == 2 and "--cluster NODES,GPUS" in result.stderr


def with_overlay(folder: Path) -> Path:
    """``folder``, holding patchset_overlay.pth read at start-up (a site folder added by sitecustomize, as
    site-packages would)."""
    (folder / "site").mkdir()
    (folder / "site" / "patchset_overlay.pth").write_text((REPO_ROOT / "patchset_overlay.pth").read_text())
    (folder / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(folder / 'site')!r})\n")
    return folder


def test_doctor_sees_the_overlay_where_the_interpreter_starts_it(tmp_path: Path) -> None:
    """The vanilla tree with the overlay started: the critic's fix acts through it."""
    result = doctor("vanilla", CRITIC, first=with_overlay(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["losses"][-1]["fix"] == "overlay"


GAE_KL_COV = [
    *CRITIC,
    "actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
]
ENGINE = "trainer.use_legacy_worker_impl=disable"


@pytest.mark.parametrize(
    ("release", "extra", "fix"),
    [
        ("0.7.1", [], {"verl-0.7 0005": "NOT FIXED here"}),
        ("0.7.1", [ENGINE], {"verl-0.7 0001": "NOT FIXED here", "verl-0.7 0005": "NOT FIXED here"}),
        (
            "0.7.0",
            [ENGINE],
            {"verl-0.7.0 0001": "NOT FIXED here", "verl 0006": "NOT FIXED here (no patch for verl 0.7.0)"},
        ),
    ],
    ids=["0.7.1-legacy-workers", "0.7.1-engine", "0.7.0-engine"],
)
def test_doctor_reads_verl_0_7_by_its_release_series_and_worker_path(
    release: str, extra: list[str], fix: dict[str, str]
) -> None:
    """On verl 0.7.x the release line's series answers, and only the engine workers' critic depends on the split: the
    default legacy workers scale each micro-batch themselves, but keep KL-Cov's choice per micro-batch. A loss the
    release's series has no patch for (KL-Cov on 0.7.0) is named from the default series."""
    result = doctor("vanilla", [*GAE_KL_COV, *extra], verl=release)
    assert result.returncode == 6, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert {row["patch"]: row["fix"] for row in report["losses"]} == fix
    assert any("legacy workers" in note for note in report["notes"]) is not extra


def test_doctor_names_the_legacy_workers_where_the_overlay_acts_on_verl_0_7_1(tmp_path: Path) -> None:
    """The overlay on vanilla 0.7.1: KL-Cov is fixed on the engine workers only, so the default run is not covered."""
    result = doctor("vanilla", GAE_KL_COV, first=with_overlay(tmp_path), verl="0.7.1")
    assert result.returncode == 6, result.stderr[-2000:]
    (row,) = json.loads(result.stdout)["losses"]
    assert row["fix"] == "NOT COVERED: the fix does not act with trainer.use_legacy_worker_impl=auto"


@pytest.mark.parametrize(
    ("tree", "exit_code", "fix"), [("vanilla", 6, "NOT FIXED here"), ("patched", 0, "patched tree")]
)
def test_doctor_reads_a_trinity_yaml_on_its_legacy_path(tree: str, exit_code: int, fix: str, tmp_path: Path) -> None:
    """Beside verl 0.7.1 Trinity trains through its legacy actors: 0008's weighting, not the engine path's 0001."""
    # the legacy config reads the model's attention heads: a local model folder, as no Hub is reachable here
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "qwen2", "num_attention_heads": 12}')
    config = tmp_path / "grpo.yaml"
    config.write_text(TRINITY_YAML.replace("Qwen/Qwen2.5-1.5B-Instruct", str(tmp_path / "model")))
    result = doctor(tree, [str(config)], verl="0.7.1")
    assert result.returncode == exit_code, result.stderr[-2000:]
    (row,) = json.loads(result.stdout)["losses"]
    assert row["patch"] == "trinity 0008" and row["fix"] == fix
    assert row["effect"].startswith("up to 32 micro-batches weighted by rows")


def test_doctor_sees_the_fix_in_a_patched_release_installed_without_its_tests(tmp_path: Path) -> None:
    """A patched wheel installs the package, not upstream's tests/, which most patches also change: the patched verl
    package alone (as site-packages holds it) still reads as fixed. Without the package-only check it read as not."""
    package = TREES["patched"] / "verl-0.8.0" / "verl"
    if not package.is_dir():
        pytest.skip(f"no patched verl 0.8.0 under {TREES['patched']} (scripts/apply.sh makes it)")
    shutil.copytree(package, tmp_path / "site" / "verl", ignore=shutil.ignore_patterns("__pycache__"))
    result = doctor("vanilla", CRITIC, first=tmp_path / "site")
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["losses"][-1]["fix"] == "patched tree"


@pytest.mark.parametrize(
    ("verl", "extra", "effect"),
    [
        ("", ["critic.fsdp.ulysses_sequence_parallel_size=2"], "x 32 (K = 64 / 2); Ulysses sp 2"),
        ("0.7.1", [ENGINE, "critic.model.fsdp_config.ulysses_sequence_parallel_size=2"], "x 32 (K = 64 / 2); Ulysses"),
        ("", ["critic.ulysses_sequence_parallel_size=2"], "x 16 (K = 32 / 2)"),
    ],
    ids=["0.8.0", "0.7.1-engine", "0.8.0-deprecated-key"],
)
def test_doctor_reads_the_critics_sequence_parallel_size_on_its_engine_config(
    verl: str, extra: list[str], effect: str
) -> None:
    """The critic's Ulysses size is set on its engine's config (``critic.fsdp``; ``critic.model.fsdp_config`` on verl
    0.7.x): 4 dp ranks of 2 GPUs, 64 rows a rank, x 32. Read only where the actor keeps it, it said x 16. The critic's
    deprecated top-level key reaches no engine (CriticConfig, unlike ActorConfig, does not copy it): 8 ranks, x 16."""
    result = doctor("vanilla", [*CRITIC, *extra], verl=verl)
    assert result.returncode == 6, result.stderr[-2000:]
    said = json.loads(result.stdout)["losses"][-1]["effect"]
    assert said.startswith(effect) and ("Ulysses" in said) is ("Ulysses" in effect), said


@pytest.mark.parametrize(
    "settings",
    [
        ["trainer.nnodes="],
        ["critic.ppo_mini_batch_size=null"],
        ["critic.use_dynamic_bsz=true", "critic.ppo_max_token_len_per_gpu=0"],
    ],
    ids=["empty", "null", "zero"],
)
def test_doctor_names_a_batch_size_that_is_not_a_positive_number(settings: list[str]) -> None:
    """``key=`` (a launch script's shell variable, unset), ``null`` or 0 where verl needs a size: the trainer stops on
    it, so the config does not compose (exit 7), in one line that names the key. It was an internal error, exit 70."""
    result = doctor("vanilla", [*CRITIC, *settings])
    assert result.returncode == 7, result.stderr[-2000:]
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert settings[-1].partition("=")[0] in result.stderr


def test_doctor_reads_a_launch_line_given_as_one_quoted_string() -> None:
    """``doctor -- "$LAUNCH"``, the whole line one word, reads as its words do. It said "not a verl launch (no '-m
    MODULE' and no script): python3 -m verl.trainer.main_ppo ...", exit 2."""
    result = doctor("vanilla", [" ".join([*CRITIC, "data.train_files='a b.parquet'"])])
    assert result.returncode == 6, result.stderr[-2000:]
    assert json.loads(result.stdout)["losses"][-1]["effect"].startswith("x 16 ")
