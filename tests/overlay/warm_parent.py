"""A warm parent for overlay cases: third-party modules imported once, each case a fork of a clean process.

Most overlay cases are a fresh process of the overlay venv that imports verl or Trinity and looks at one thing;
~85 % of such a process is importing torch, transformers, ray and the rest, which the overlays never touch. This
parent, started like any case (``python -P warm_parent.py LIST MODULE...`` with the case's ``PATCHSET_OVERLAYS``,
so ``patchset_overlay.pth`` ran at its start as it does for users), learns which modules importing ``MODULE...``
loads (in a throwaway fork; kept in the file LIST for the next parent), imports every one of them that is not
upstream's, an overlay's, Hydra's or OmegaConf's, and checks that none of those got in. Each case is then a fork
of it: the upstream and overlay modules are imported by the case itself, first, in the order it chooses, as in a
fresh process.

Requests are JSON lines on stdin, ``{"argv": [...], "cwd": ..., "pythonpath": [...], "stdout": ..., "stderr":
...}`` (``argv`` as after ``python -P``: a script path and its arguments, or ``-m`` and a module); each answer is
a JSON line ``{"returncode": N}``. The first line out is ``{"ready": {...}}``, saying what was preloaded.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import threading
import traceback
from pathlib import Path

# modules a case must import itself: upstream's, the overlays', and what composing Hydra's config imports first
CASE_OWNED = ("verl", "trinity", "verl_overlay", "trinity_overlay", "patchset_overlay", "hydra", "hydra_plugins")
CASE_OWNED += ("patchset_overlay_registry", "omegaconf")


def _owned(name: str) -> bool:
    return name.split(".", 1)[0] in CASE_OWNED


def _modules_loaded_by(targets: list[str]) -> list[str]:
    """The modules importing ``targets`` loads, in import order, learned in a child that is then thrown away."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        for name in targets:
            importlib.import_module(name)
        with os.fdopen(write_end, "w") as stream:
            stream.write("\n".join(sys.modules))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as stream:
        names = stream.read().split("\n")
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"warm_parent: importing {targets} failed in the probe child")
    return names


def _module_list(path: Path, targets: list[str]) -> list[str]:
    """The modules importing ``targets`` loads: from ``path`` if an earlier parent wrote it, else learned now."""
    if path.exists():
        return path.read_text(encoding="utf-8").split("\n")
    names = _modules_loaded_by(targets)
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text("\n".join(names), encoding="utf-8")
    partial.replace(path)  # atomic: a parent starting at the same time reads all of it or learns its own
    return names


def preload(names: list[str]) -> dict[str, int]:
    """Import every module of ``names`` (in that order) except those a case must import itself."""
    owned_at_start = {name for name in sys.modules if _owned(name)}
    imported = failed = 0
    for name in names:
        if name in sys.modules or _owned(name) or name == "__main__":
            continue
        try:
            importlib.import_module(name)
            imported += 1
        except Exception:  # aliases and private extension parts that cannot be imported by name
            failed += 1
    leaked = sorted(name for name in sys.modules if _owned(name) and name not in owned_at_start)
    if leaked:
        raise SystemExit(f"warm_parent: preloading imported modules a case must import itself: {leaked[:10]}")
    return {"imported": imported, "skipped": failed, "threads": threading.active_count()}


def _run_case(request: dict) -> int:
    """In the forked child: become ``python -P ARGV...`` started in ``cwd`` with ``pythonpath`` on PYTHONPATH."""
    os.chdir(request["cwd"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.path[0:0] = request["pythonpath"]
    if request["pythonpath"]:
        os.environ["PYTHONPATH"] = os.pathsep.join(request["pythonpath"])
    argv = request["argv"]
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int | None):
            print(exit_.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve(module_list: Path, targets: list[str]) -> None:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing a preloaded module prints may reach the protocol stream
    protocol.write(json.dumps({"ready": preload(_module_list(module_list, targets))}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _run_case(request)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        protocol.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2:])
