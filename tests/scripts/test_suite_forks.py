"""The suite fork server (`patchset.testenv.suite_forks`, `patchset.testenv.suite_fork_server`): a run it forks is the
command a fresh interpreter would run, in the run's folder, environment and streams, with what the server learned
to import already imported; a hang is ended as any run's; the server ends with the process that started it.

Each test starts a server of this interpreter on a tree of one module, ``tree_entry``, which imports a standard
module nothing else here imports (``wave``): the server learns it and imports it, so a run finds it imported without
importing it (the server is also given a module that does not exist, which it passes over); the tree's own module
it leaves to the run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from patchset.plumbing.bounded import Limit, run_bounded
from patchset.plumbing.errors import TimedOut
from patchset.plumbing.stacks import is_running
from patchset.testenv import suite_forks
from patchset.testenv.suite_forks import SOCKET_VARIABLE, SuiteForkServer

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON = Path(sys.executable)
# the server's environment, and every run's unless a test says otherwise: one thread, as the test command sets
ENVIRON = {key: value for key, value in os.environ.items() if key != "MKL_NUM_THREADS"} | {"OMP_NUM_THREADS": "1"}
TEST_FILE = """\
import json, os, sys

def test_where(tmp_path):
    found = {"cwd": os.getcwd(), "variable": os.environ.get("SUITE_FORKS_PROBE"), "path": sys.path[:2],
             "preloaded": "wave" in sys.modules, "tree_module": "tree_entry" in sys.modules, "parent": os.getppid()}
    with open(os.environ["SUITE_FORKS_OUT"], "w") as out:
        json.dump(found, out)
    print("the run's own output")

def test_fails_when_asked():
    assert not os.environ.get("SUITE_FORKS_FAIL")

def test_hangs_when_asked():
    import time
    while os.environ.get("SUITE_FORKS_HANG"):
        time.sleep(0.1)
"""


@pytest.fixture
def sockets() -> Iterator[Path]:
    """A folder for Unix sockets, whose paths may have 107 bytes at most: tmp_path can be longer (under the test
    command's scratch folder it is)."""
    folder = Path(tempfile.mkdtemp(prefix="sockets-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def server(tmp_path: Path, sockets: Path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "tree_entry.py").write_text("import wave\n", encoding="utf-8")
    address = str(sockets / "forks.sock")
    modules = ["patchset_no_such_module", "tree_entry"]  # one that does not import: the probe learns the other's
    started = SuiteForkServer(address, [tree], modules, tmp_path / "list" / "modules.txt", tmp_path / "log")
    started.start(PYTHON, REPO_ROOT, ENVIRON)
    yield started
    started.stop()


def _run(server: SuiteForkServer, tmp_path: Path, output, **variables: str) -> tuple[int, dict]:
    folder = tmp_path / "suite"
    folder.mkdir(exist_ok=True)
    (folder / "test_probe.py").write_text(TEST_FILE, encoding="utf-8")
    extra = tmp_path / "extra"
    env = {**ENVIRON, "PYTHONPATH": str(extra), "SUITE_FORKS_PROBE": "set", **variables}
    env["SUITE_FORKS_OUT"] = str(tmp_path / "found.json")
    launch = suite_forks.launcher(PYTHON, {SOCKET_VARIABLE: server.address})
    command = [str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(folder)]
    code = run_bounded(command, "the probe", Limit(60, "more"), cwd=folder, env=env, output=output, launch=launch)
    found = json.loads((tmp_path / "found.json").read_text()) if (tmp_path / "found.json").exists() else {}
    return code, found


def test_a_forked_run_is_the_command_in_its_folder_environment_and_streams(server, tmp_path: Path):
    with (tmp_path / "out.txt").open("w+") as output:
        code, found = _run(server, tmp_path, output)
        output.seek(0)
        printed = output.read()

    assert code == 0, printed
    assert found["parent"] == server.process.pid  # a fork of the server, not a fresh interpreter
    assert found["cwd"] == str(tmp_path / "suite") and found["variable"] == "set"
    assert found["path"] == [str(tmp_path / "suite"), str(tmp_path / "extra")]  # the folder, then PYTHONPATH
    assert found["preloaded"] and not found["tree_module"]  # what the tree imports, not the tree's own module
    assert "3 passed" in printed
    assert (tmp_path / "list" / "modules.txt").is_file()  # kept for the next server


def test_a_run_given_no_output_writes_to_the_file_descriptors_a_fresh_interpreter_would(server, tmp_path, capsys):
    code, found = _run(server, tmp_path, None)  # capsys: this process's sys.stdout has no file descriptor

    assert code == 0
    assert found["parent"] == server.process.pid


def test_a_forked_module_other_than_pytest_writes_its_output_and_errors_apart(server, tmp_path: Path):
    (tmp_path / "speaker.py").write_text("import os, sys\nprint(os.getppid())\nsys.exit('said on stderr')\n")
    launch = suite_forks.launcher(PYTHON, {SOCKET_VARIABLE: server.address})
    env = {**ENVIRON, "PYTHONPATH": str(tmp_path)}
    with (tmp_path / "out.txt").open("w+") as output, (tmp_path / "err.txt").open("w+") as errors:
        run = launch([str(PYTHON), "-m", "speaker"], tmp_path, env, output, errors)
        code = run.wait(timeout=60)
        output.seek(0)
        errors.seek(0)
        printed, said = output.read(), errors.read()

    assert code == 1
    assert printed == f"{server.process.pid}\n"  # a fork of the server
    assert said == "said on stderr\n"


def test_a_forked_run_writes_bytecode_where_its_environment_says_as_a_fresh_interpreter_does(server, tmp_path: Path):
    """A run that asks for no bytecode (the regression runs, on a user's checkout) gets none, whatever the server's
    own environment said; one given a bytecode folder writes there."""
    (tmp_path / "bytecode.py").write_text("import sys\nprint(sys.dont_write_bytecode, sys.pycache_prefix)\n")
    launch = suite_forks.launcher(PYTHON, {SOCKET_VARIABLE: server.address})
    base = {
        key: value for key, value in ENVIRON.items() if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    for variables in ({"PYTHONDONTWRITEBYTECODE": "1"}, {"PYTHONPYCACHEPREFIX": str(tmp_path / "pycache")}):
        env = {**base, "PYTHONPATH": str(tmp_path), **variables}
        fresh = subprocess.run([str(PYTHON), "-m", "bytecode"], env=env, capture_output=True, text=True, check=True)
        with (tmp_path / "out.txt").open("w+") as output:
            assert launch([str(PYTHON), "-m", "bytecode"], tmp_path, env, output, None).wait(timeout=60) == 0
            output.seek(0)
            assert output.read() == fresh.stdout, variables


def test_a_forked_run_exits_as_pytest_does(server, tmp_path: Path):
    with (tmp_path / "out.txt").open("w+") as output:
        code, _ = _run(server, tmp_path, output, SUITE_FORKS_FAIL="1")

    assert code == 1


def test_a_run_asking_for_other_threads_than_the_servers_is_left_to_a_fresh_interpreter_saying_why(
    server, tmp_path: Path, capsys
):
    with (tmp_path / "out.txt").open("w+") as output:
        code, found = _run(server, tmp_path, output, OMP_NUM_THREADS="2")

    assert code == 0
    assert found["parent"] == os.getpid()  # a fresh interpreter, started here
    said = capsys.readouterr().out
    assert "declined (the run asks for OMP_NUM_THREADS=2, the server has 1); a fresh interpreter runs it" in said
    assert is_running(server.process.pid)  # and it serves on


def test_a_client_gone_before_it_asked_leaves_the_server_serving(server, tmp_path: Path):
    for message in (b"", b"{not json", json.dumps({"env": {}}).encode()):
        client = suite_forks._connect(server.address, 30)
        assert client is not None
        if message:
            client.send(message)
        client.close()

    with (tmp_path / "out.txt").open("w+") as output:
        code, found = _run(server, tmp_path, output)

    assert code == 0
    assert found["parent"] == server.process.pid


def _hanging_run(server: SuiteForkServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The probe's hanging test as a pytest command, its folder, environment and a launch from ``server``."""
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "test_probe.py").write_text(TEST_FILE, encoding="utf-8")
    env = {**ENVIRON, "SUITE_FORKS_HANG": "1", "SUITE_FORKS_OUT": str(tmp_path / "found.json")}
    launch = suite_forks.launcher(PYTHON, {SOCKET_VARIABLE: server.address})
    command = [str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "hangs"]
    return [*command, str(folder)], folder, env, launch


def test_a_run_whose_server_ends_fails_and_is_ended_with_it(server, tmp_path: Path, capsys):
    command, folder, env, launch = _hanging_run(server, tmp_path)
    with (tmp_path / "out.txt").open("w") as output:
        run = launch(command, folder, env, output)
        assert run is not None

        server.process.kill()

        assert run.wait(timeout=30) == 1
    assert not is_running(run.pid)  # not left to write into the folders of a run that has ended
    assert f"the suite fork server ended during the run (pid {run.pid})" in capsys.readouterr().out


def test_a_hung_forked_run_is_ended_within_its_limit(server, tmp_path: Path):
    command, folder, env, launch = _hanging_run(server, tmp_path)
    started = time.monotonic()
    with (tmp_path / "out.txt").open("w") as output, pytest.raises(TimedOut) as hung:
        run_bounded(command, "the hanging probe", Limit(3, "more"), cwd=folder, env=env, output=output, launch=launch)

    assert time.monotonic() - started < 30
    assert "the hanging probe hung" in str(hung.value)
    assert is_running(server.process.pid)  # the server serves on
    Path(str(hung.value).rpartition(" are in ")[2]).unlink()  # the stacks it kept


def test_a_launch_declines_other_commands_and_a_server_that_does_not_answer(tmp_path: Path, sockets: Path, monkeypatch):
    assert suite_forks.launcher(PYTHON, {}) is None
    monkeypatch.setattr(suite_forks, "SOCKET_LIMIT_S", 0.3)
    launch = suite_forks.launcher(PYTHON, {SOCKET_VARIABLE: str(sockets / "nobody.sock")})
    assert launch is not None
    assert launch([str(PYTHON), "-c", "pass"], tmp_path, dict(os.environ), None) is None
    assert launch([str(PYTHON), "-m", "pytest"], tmp_path, dict(os.environ), None) is None


def test_a_server_that_ends_before_it_forks_leaves_the_run_to_a_fresh_interpreter_at_once(
    tmp_path: Path, sockets: Path
):
    address = str(sockets / "dying.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(4)  # a server still importing: it has not accepted yet
    closer = threading.Timer(0.5, listener.close)  # and then it dies
    closer.start()
    launch = suite_forks.launcher(PYTHON, {SOCKET_VARIABLE: address})
    started = time.monotonic()
    with (tmp_path / "out.txt").open("w") as output:
        assert launch([str(PYTHON), "-m", "pytest"], tmp_path, dict(os.environ), output) is None

    assert time.monotonic() - started < 10  # not the ready limit (300 s)
    closer.join()


def test_the_server_ends_with_the_process_that_started_it(tmp_path: Path, sockets: Path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "tree_entry.py").write_text("import wave\n", encoding="utf-8")
    owner = subprocess.Popen(["sleep", "60"])
    address = sockets / "forks.sock"
    command = [str(PYTHON), "-P", "-m", "patchset.testenv.suite_fork_server", str(address), str(owner.pid)]
    command += [str(tmp_path / "modules.txt"), str(tree), "--", "tree_entry"]
    server = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    deadline = time.monotonic() + 30
    while not address.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert address.exists(), "the server never listened"

    owner.kill()
    owner.wait()

    assert server.wait(timeout=10) == 0
    assert not address.exists()
