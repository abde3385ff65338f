"""Fault injection on the shared cache: runs at once, and runs killed at any moment, never leave it half-made.

Invariants. Default-pin runs started together in one cache (two terminals, two CI jobs in one workspace) each exit
0, or 4 with one line naming the run that holds the patched tree (its pid); none shows a traceback, and the cache
ends whole: every pinned checkout usable, every patched tree exactly the series applied. A run killed with SIGKILL
in any phase (the download, the unpacking, the checkout's commit, the clone, the patching; the wheel built from an
sdist; a gate's record), on either upstream, leaves nothing that the next run trips over or that stays: the next
plain run exits 0, the cache is whole, and no scratch folder (``.patchset-<kind>-<pid>-*``), half-written file or
lock folder is left. Each case is recorded in the fault registry (conftest.py).

The runs are child processes (``python -c HOOK``) on the fake world of ``patchset_fakes`` (its sdists served by a
fake PyPI), so that the whole module costs a few seconds. ``PATCHSET_CACHE_CAMPAIGN=1`` runs, by hand, the same
checks on the real pinned releases: 20 trials each of two and of three runs at once, and SIGKILL at seeded random
moments and in each phase of both upstreams; it prints its counts.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from patchset_fakes import REPO_ROOT, TEST_GIT_ENV, tree_digest

from patchset import cli
from patchset.plumbing import cachelock
from patchset.plumbing.ui import Console, display_path
from patchset.upstreams import fetch
from patchset.upstreams.pins import load_pins


def series(argv: list[str]) -> int:
    """``python -m patchset export ARGV``."""
    return cli.main(["export", *argv])


HOOK = r"""
import os, shutil, signal, sys, tarfile
from pathlib import Path
from patchset.plumbing import gitops
from patchset.upstreams import fetch

env = os.environ
phase, _, who = env.get("FAULT_KILL", "").partition(":")  # e.g. "unpack:trinity": that phase, that upstream

def kill(here, name):
    if phase == here and who in str(name):
        os.kill(os.getpid(), signal.SIGKILL)

def download(name, version, dest):  # a fake PyPI: the sdists in FAULT_SDISTS
    wanted = fetch.normalized(f"{name}-{version}.")
    [source] = [f for f in Path(env["FAULT_SDISTS"]).iterdir() if fetch.normalized(f.name).startswith(wanted)]
    got = Path(shutil.copy(source, dest))
    kill("download", name)
    return got
fetch.pip_download = download

real_extract = tarfile.TarFile.extractall
def extractall(self, *args, **kwargs):
    real_extract(self, *args, **kwargs)
    kill("unpack", Path(self.name).name)
tarfile.TarFile.extractall = extractall

for hooked, name_of in (("init_commit_tag", lambda a, k: k["message"]), ("clone_local", lambda a, k: Path(a[0]).name)):
    def wrap(real, here, name_of):
        def call(*args, **kwargs):
            result = real(*args, **kwargs)
            kill(here, name_of(args, kwargs))
            return result
        return call
    here = "checkout" if hooked == "init_commit_tag" else "clone"
    setattr(gitops, hooked, wrap(getattr(gitops, hooked), here, name_of))

real_apply = gitops.apply_patch
def apply_patch(cwd, patch, *, reverse=False, check=False, directory=""):
    result = real_apply(cwd, patch, reverse=reverse, check=check, directory=directory)
    if not check and "patched" in Path(cwd).parts:
        kill("apply", Path(cwd).name)
    return result
gitops.apply_patch = apply_patch

if sys.argv[1] == "wheel":  # build the wheel of an sdist into the cache (pip wheel faked: it writes a wheel)
    from patchset.testcommand import overlay_env
    def run_step(command, step):
        out = Path(command[command.index("--wheel-dir") + 1])
        (out / "fake-1.0-py3-none-any.whl").write_bytes(b"a wheel")
        kill("wheel", step)
    overlay_env.run_step = run_step
    sdist = Path(sys.argv[2])
    print(overlay_env._release_wheel(Path(sys.executable), sdist, fetch.sha256_of(sdist), Path(sys.argv[3])))
elif sys.argv[1] == "gate":  # remember a gate's pass in the cache
    from patchset.export import gate_record
    real_replace = os.replace
    def replace(source, dest):
        if str(dest).endswith(".json"):
            kill("gate", dest)
        real_replace(source, dest)
    os.replace = replace
    gate_record.remember(Path(sys.argv[2]), "0" * 64, "gate passed", "its output")
else:
    from patchset.cli import main
    raise SystemExit(main(sys.argv[1:]))
"""

# every phase of a default-pin run that writes into the cache (verl's come first in each), on both upstreams: the
# campaign tries each on each; the test command each phase once, on the upstreams in turn
PHASES = ("download", "unpack", "checkout", "clone", "apply")
EVERY_PHASE = [f"{phase}:{who}" for phase in PHASES for who in ("verl", "trinity")]
EACH_PHASE = [f"{phase}:{('trinity', 'verl')[number % 2]}" for number, phase in enumerate(PHASES)]


@dataclass(frozen=True)
class Setup:
    """A cache to run in, the patches dir, and where the fake PyPI takes its sdists from."""

    cache: Path
    patches: Path
    sdists: Path
    temp: Path

    def argv(self) -> list[str]:
        return ["apply", "--no-test", "-q", "--patches-dir", str(self.patches), "--cache", str(self.cache)]

    def child(self, *argv: str, kill: str = "") -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "TMPDIR": str(self.temp), "FAULT_SDISTS": str(self.sdists)}
        env |= {"FAULT_KILL": kill, cachelock.WAIT_ENV: "120"}
        command = [sys.executable, "-c", HOOK, *(argv or self.argv())]
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, *argv: str, kill: str = "") -> tuple[int, str]:
        proc = self.child(*argv, kill=kill)
        _, err = proc.communicate(timeout=600)
        return proc.returncode, err


def _setup(base: Path) -> Setup:
    (base / "tmpdir").mkdir()
    return Setup(base / "cache", base / "patches", base / "sdists", base / "tmpdir")


@pytest.fixture
def fake(world, tmp_path: Path) -> Setup:
    """A copy of the fake world, its cache empty."""
    return _setup(tmp_path)


@pytest.fixture(scope="module")
def expected(world_template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The patched trees of a plain run in the fake world (``reference``), once for the module."""
    base = tmp_path_factory.mktemp("reference")
    shutil.copytree(world_template, base, symlinks=True, dirs_exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        for key, value in TEST_GIT_ENV.items():
            patch.setenv(key, value)
        return reference(_setup(base))


def leftovers(setup: Setup) -> list[str]:
    """What runs left in the cache or the temp folder: scratch folders and files of any process, lock folders."""
    found = [str(path) for path in setup.temp.iterdir()]
    for folder in [setup.cache, *(p for p in setup.cache.iterdir() if p.is_dir())] if setup.cache.is_dir() else []:
        for path in folder.iterdir():
            name = path.name
            if name.startswith((".patchset-", "patchset-", ".download-", ".unpack-", ".tmp-", cachelock.LOCKS)):
                found.append(str(path))
    return found


def cache_problems(setup: Setup, expected: dict[str, str]) -> list[str]:
    """Why the cache is not whole: a pinned checkout that is not usable, a patched tree that is not exactly the
    series applied (``expected``: {dirname: tree_digest}), a leftover."""
    cache = fetch.Cache(setup.cache)
    problems = leftovers(setup)
    for pin in load_pins(setup.patches / "upstreams.toml").defaults():
        checkout = cache.upstreams / pin.dirname
        if not checkout.is_dir() or (why := fetch.unusable(checkout, pin)) is not None:
            problems.append(f"{checkout}: {why if checkout.is_dir() else 'missing'}")
        patched = cache.patched / pin.dirname
        if expected and (not patched.is_dir() or tree_digest(patched) != expected[pin.dirname]):
            problems.append(f"{patched}: not the series applied")
    return problems


def reference(setup: Setup) -> dict[str, str]:
    """{dirname: tree_digest} of each patched tree after a plain run in an empty cache; the cache is emptied again."""
    code, err = setup.run()
    assert code == 0, err
    pins = load_pins(setup.patches / "upstreams.toml").defaults()
    digests = {pin.dirname: tree_digest(setup.cache / "patched" / pin.dirname) for pin in pins}
    subprocess.run(["rm", "-rf", str(setup.cache)], check=True)
    return digests


def parallel_trials(setup: Setup, expected: dict[str, str], runs: int, trials: int, faults) -> list[str]:
    """``trials`` times, ``runs`` default-pin runs started together (the first trial in an empty cache: they fetch
    at once too); returns what went wrong, and records each run in the fault registry."""
    wrong = []
    for trial in range(trials):
        started = [setup.child() for _ in range(runs)]
        results = [(proc.pid, *proc.communicate(timeout=600), proc.returncode) for proc in started]
        problems = cache_problems(setup, expected)
        for pid, _, err, code in results:
            errors = [line for line in err.splitlines() if line.startswith("error: ")]
            others = [other for other, *_ in results if other != pid]
            named = (
                code == 4 and len(errors) == 1 and any(f"another run (pid {other}, " in errors[0] for other in others)
            )
            fine = (code == 0 and not errors or named) and "Traceback" not in err
            if code != 0 or problems:  # a refusal, or (exit 0 on a cache that is not whole) a silent success
                faults.record(f"{runs}-at-once-trial-{trial}", code, intact=not problems, message=err.strip())
            if not fine:
                wrong.append(f"{runs} at once, trial {trial}: pid {pid} exit {code}: {err.strip()[-600:]}")
        if not any(code == 0 for *_, code in results):
            wrong.append(f"{runs} at once, trial {trial}: no run succeeded")
        wrong += [f"{runs} at once, trial {trial}: {problem}" for problem in problems]
    return wrong


def killed_then_run(
    setup: Setup, expected: dict[str, str], faults, *, kill: str = "", after: float = 0.0
) -> tuple[bool, list[str]]:
    """A run killed with SIGKILL (in phase ``kill``, or ``after`` seconds), then a plain run: whether the kill landed
    (a run may end before ``after``: no fault tried), and what went wrong."""
    case = f"sigkill-{kill or f'after-{after:.2f}s'}"
    victim = setup.child(kill=kill)
    if after:
        time.sleep(after)
        victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=600)
    if after and victim.returncode == 0:
        return False, []
    code, err = setup.run()
    problems = cache_problems(setup, expected)
    faults.record(case, victim.returncode, intact=not problems, message=err.strip())
    wrong = [f"{case}: {problem}" for problem in problems]
    if code != 0 or "Traceback" in err:
        wrong.append(f"{case}: the next run exit {code}: {err.strip()[-600:]}")
    if kill and victim.returncode != -signal.SIGKILL:
        wrong.append(f"{case}: the phase was never reached (exit {victim.returncode})")
    return True, wrong


def test_default_pin_runs_at_once_exit_0_or_4_naming_the_holder_and_leave_the_cache_whole(fake, expected, faults):
    """Three at once in an empty cache: they wait for each other's fetches, and the patched trees' holder wins."""
    assert parallel_trials(fake, expected, runs=3, trials=1, faults=faults) == []


@pytest.mark.parametrize("kill", EACH_PHASE)
def test_a_run_killed_in_any_phase_leaves_nothing_the_next_run_trips_over(fake, expected, faults, kill):
    assert killed_then_run(fake, expected, faults, kill=kill) == (True, [])


@pytest.mark.parametrize("what", ["wheel", "gate"])
def test_a_wheel_build_or_gate_record_killed_half_way_is_swept_and_made_whole_by_the_next(fake, faults, what):
    where = fake.cache / ("sdist-wheels" if what == "wheel" else "gates")
    argv = [what, str(fake.sdists / "verl-0.8.0.tar.gz"), str(where)] if what == "wheel" else [what, str(where)]
    killed, _ = fake.run(*argv, kill=f"{what}:")
    assert killed == -signal.SIGKILL

    code, err = fake.run(*argv)

    made = sorted(path.name for path in where.rglob("*") if path.is_file())
    problems = leftovers(fake)
    faults.record(f"sigkill-{what}", killed, intact=not problems, message=err.strip())
    assert code == 0 and "Traceback" not in err, err
    assert problems == [] and made == (["fake-1.0-py3-none-any.whl"] if what == "wheel" else ["0" * 64 + ".json"])


# --- by hand: PATCHSET_CACHE_CAMPAIGN=1 pytest tests/scripts/test_faults_cache.py -k campaign -s -p no:xdist --------


@pytest.mark.skipif(not os.environ.get("PATCHSET_CACHE_CAMPAIGN"), reason="by hand: PATCHSET_CACHE_CAMPAIGN=1")
def test_campaign_on_the_real_pinned_releases(tmp_path, faults):
    sdists = fetch.resolve_cache(None, os.environ, REPO_ROOT).sdists
    if not sdists.is_dir():
        pytest.skip(f"no cached sdists in {sdists}")
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    real = Setup(tmp_path / "cache", REPO_ROOT / "patches", sdists, temp)
    expected = reference(real)
    trials = int(os.environ.get("PATCHSET_CACHE_CAMPAIGN_TRIALS", "20"))
    wrong: list[str] = []
    counts: dict[str, Sequence[int]] = {}
    for runs in (2, 3):
        found = parallel_trials(real, expected, runs=runs, trials=trials, faults=faults)
        counts[f"{runs} runs at once"] = (trials, trials - len({line.split(":")[0] for line in found}))
        wrong += found
    for kill in EVERY_PHASE:
        subprocess.run(["rm", "-rf", str(real.cache)], check=True)
        _, found = killed_then_run(real, expected, faults, kill=kill)
        counts[f"sigkill {kill}"] = (1, 0 if found else 1)
        wrong += found
    draw = random.Random(36)
    lengths = {}  # how long a plain run takes in an empty cache and in a full one: the kills land within it
    for cold in (True, False):
        started = time.monotonic()
        assert real.run()[0] == 0
        lengths[cold] = time.monotonic() - started
        if cold:
            subprocess.run(["rm", "-rf", str(real.cache)], check=True)
    landed = good = 0
    while landed < trials:
        cold = draw.random() < 0.5
        if cold:
            subprocess.run(["rm", "-rf", str(real.cache)], check=True)  # the kill may land in a fetch
        hit, found = killed_then_run(real, expected, faults, after=draw.uniform(0.02, 0.95 * lengths[cold]))
        landed += hit
        good += hit and not found
        wrong += found
    counts["sigkill at random moments"] = (trials, good)
    for name, (tried, whole) in counts.items():
        print(f"{name}: trials {tried}, whole {whole}")
    assert wrong == []


def test_scratch_folders_named_without_a_pid_by_earlier_versions_are_removed_by_the_next_run(fake, expected):
    """Before scratch folders carried the pid, a killed fetch left ``.download-*`` and ``.tmp-<entry>-*``."""
    for rel in ("sdists/.download-abc", "upstreams/.tmp-verl-0.8.0-abc/tree", "patched/.tmp-trinity-rft-0.6.0-abc"):
        (fake.cache / rel).mkdir(parents=True)

    code, err = fake.run()

    assert code == 0, err
    assert cache_problems(fake, expected) == []


def test_a_second_maintainer_checkout_into_one_folder_at_once_is_refused_naming_the_first(tmp_path, capsys, faults):
    cache, dest = tmp_path / "cache", tmp_path / "checkout"
    first = "scripts/export.sh checkout"
    with cachelock.hold(cache, cachelock.entry_for("maintain", dest), "it", Console(), wait=False, command=first):
        code = series(["checkout", "verl", "--cache", str(cache), str(dest)])

    [error] = capsys.readouterr().err.splitlines()
    faults.record("second-maintainer-checkout", code, intact=not dest.exists(), message=error)
    assert code == 4 and not dest.exists()
    assert error.startswith(
        f"error: the maintainer checkout {display_path(dest)} is in use by another run (pid {os.getpid()}, "
    )
    assert "scripts/export.sh checkout), which holds " in error and "nothing was changed" in error
