"""What the overlays cost at interpreter start and at the first verl import, as ratios measured in one run: the
overlay venv, the same with ``PATCHSET_OVERLAYS=0``, and a scratch venv over the same site-packages without
``patchset_overlay.pth`` take turns, so all see the same machine load.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPORT_CORE_ALGOS = "import verl.trainer.ppo.core_algos"
# the first watched import judges every piece and derives every file of the series (verl's seven, Hydra's YAML)
FRESH_CACHE = "fresh cache"


def _bare_venv(folder: Path, overlay_python: Path) -> Path:
    """A venv with the overlay venv's packages on its path and no ``patchset_overlay.pth``."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    script = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([str(python), "-c", script], check=True, capture_output=True, text=True).stdout.strip()
    # the overlay venv's site-packages and the folders its path .pth files add (the locked dependencies)
    script = "import site, sys; print('\\n'.join(p for p in sys.path if 'site-packages' in p))"
    found = subprocess.run([str(overlay_python), "-c", script], check=True, capture_output=True, text=True).stdout
    Path(purelib, "_overlay_packages.pth").write_text("\n".join(found.split()) + "\n")
    return python


def _timed(python: Path, code: str, env: dict[str, str]) -> float:
    if env.get("PATCHSET_OVERLAY_CACHE") == FRESH_CACHE:  # the derived files written anew: a first import
        env = {**env, "PATCHSET_OVERLAY_CACHE": tempfile.mkdtemp(prefix="patchset-bench-cache-")}
    started = time.perf_counter()
    subprocess.run([str(python), "-c", code], check=True, env=env, capture_output=True)
    return time.perf_counter() - started


def measure(overlay_python: Path, rounds: int = 20, import_rounds: int = 5) -> dict[str, float]:
    """Median seconds per variant: start (on, off, no .pth) and ``import verl.trainer.ppo.core_algos`` (on with the
    derived files cached, on with a fresh cache, off)."""
    env_on = {key: value for key, value in os.environ.items() if key not in ("PATCHSET_OVERLAYS", "PYTHONPATH")}
    env_off = {**env_on, "PATCHSET_OVERLAYS": "0"}
    env_fresh = {**env_on, "PATCHSET_OVERLAY_CACHE": FRESH_CACHE}
    with tempfile.TemporaryDirectory(prefix="patchset-bench-startup-") as tmp:
        bare = _bare_venv(Path(tmp) / "venv", overlay_python)
        variants = {
            "start, overlays on": (overlay_python, "pass", env_on, rounds),
            "start, PATCHSET_OVERLAYS=0": (overlay_python, "pass", env_off, rounds),
            "start, no .pth": (bare, "pass", env_on, rounds),
            "import core_algos, overlays on": (overlay_python, IMPORT_CORE_ALGOS, env_on, import_rounds),
            "import core_algos, on, fresh cache": (overlay_python, IMPORT_CORE_ALGOS, env_fresh, import_rounds),
            "import core_algos, overlays off": (overlay_python, IMPORT_CORE_ALGOS, env_off, import_rounds),
        }
        times: dict[str, list[float]] = {name: [] for name in variants}
        for index in range(max(rounds, import_rounds)):
            for name, (python, code, env, count) in variants.items():
                if index < count:
                    times[name].append(_timed(python, code, env))
    return {name: statistics.median(values) for name, values in times.items()}


def report(medians: dict[str, float]) -> str:
    on, off, bare = (medians[f"start, {key}"] for key in ("overlays on", "PATCHSET_OVERLAYS=0", "no .pth"))
    import_on, import_off = medians["import core_algos, overlays on"], medians["import core_algos, overlays off"]
    import_fresh = medians["import core_algos, on, fresh cache"]
    lines = [f"  {name:<34} {value * 1000:9.1f} ms" for name, value in medians.items()]
    lines += [
        f"  start on / off:    {on / off:.3f} ({(on - off) * 1000:+.1f} ms)",
        f"  start on / no .pth: {on / bare:.3f} ({(on - bare) * 1000:+.1f} ms; target at most +10 ms)",
        f"  import core_algos on / off: {import_on / import_off:.3f} ({(import_on - import_off) * 1000:+.0f} ms)",
        f"  import core_algos on, fresh cache / off: {import_fresh / import_off:.3f} "
        f"({(import_fresh - import_off) * 1000:+.0f} ms)",
    ]
    return "\n".join(lines)
