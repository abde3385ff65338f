"""`pip install .` installs the overlays and what they need at run time, and nothing else.

Users put this project into production environments to get the overlays; the tooling (`patchset/`) and the test
harness (`tests/`) run from a checkout and must not land in site-packages. Read from the installed distribution's
own RECORD, in the overlay venv the test command built with `pip install` of this project.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import PurePosixPath

RUNTIME_TOP_LEVEL = {"patchset_overlay", "patchset_overlay_registry", "patchset_overlay.pth", "hydra_plugins"}
RUNTIME_TOP_LEVEL |= {"verl_overlay", "trinity_overlay"}
READ_RECORD = """
import importlib.metadata as m, json
files = m.distribution("verl-trinity-patchset").files or []
print(json.dumps([str(f) for f in files]))
"""


def test_the_installed_project_holds_only_the_overlays_and_their_runtime(overlay_python):
    """Every installed file's top-level entry is an overlay package, the hydra plugin, the .pth or metadata."""
    listed = subprocess.run([str(overlay_python), "-P", "-c", READ_RECORD], capture_output=True, text=True, check=True)
    files = json.loads(listed.stdout)
    top_level = {PurePosixPath(name).parts[0] for name in files}
    extra = {name for name in top_level if name not in RUNTIME_TOP_LEVEL and not name.endswith(".dist-info")}
    assert files, "the installed distribution lists no files"
    assert extra == set(), f"pip install . put {sorted(extra)} into site-packages; only the overlays belong there"
    assert RUNTIME_TOP_LEVEL <= top_level, f"missing from the install: {sorted(RUNTIME_TOP_LEVEL - top_level)}"
