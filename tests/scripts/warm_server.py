"""A warm fork server, made on purpose: ``python warm_server.py used|unused|threaded``.

``used``: the process starts its warm server (`patchset.plumbing.children.start_warm_server`), sharing a module and
one that does not exist, then imports a module of its own, then runs two children asking for a preload module nothing
had imported. ``unused``: it starts the
server and ends without a child. ``threaded``: it starts it with another thread running. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from patchset.plumbing import children
from patchset.plumbing.children import run_children

PRELOAD = "wave"  # a standard module that nothing here imports
AFTER = "colorsys"  # imported by this process after its server was forked
SHARED = "quopri"  # imported by this process for itself and its children, before the fork
MISSING = "patchset_no_such_module"  # shared too, but there is no such module


def probe(out: str) -> None:
    names = {PRELOAD, AFTER, SHARED}
    found = {name: name in sys.modules for name in names}
    Path(out).write_text(json.dumps({"pid": os.getpid(), "parent": os.getppid(), "modules": found}))


def _server_pid() -> int | None:
    return children.forkserver._forkserver._forkserver_pid


def main(how: str, folder: str) -> dict:
    if how == "threaded":
        stop = threading.Event()
        thread = threading.Thread(target=stop.wait)
        thread.start()
        started = children.start_warm_server()
        stop.set()
        thread.join()
        return {"started": started, "server": _server_pid(), "refusal": children.warm_server_refusal()}
    assert PRELOAD not in sys.modules and AFTER not in sys.modules and SHARED not in sys.modules
    started = children.start_warm_server(share=(SHARED, MISSING))
    result: dict = {"started": started, "server": _server_pid(), "pid": os.getpid(), "shared": SHARED in sys.modules}
    result["refusal"] = children.warm_server_refusal()
    if how == "used":
        __import__(AFTER)
        outs = [str(Path(folder) / f"child{n}.json") for n in range(2)]
        result["codes"] = run_children(probe, [(out,) for out in outs], 60, "probe", (PRELOAD,))
        result["children"] = [json.loads(Path(out).read_text()) for out in outs]
    return result


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])), flush=True)
