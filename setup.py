"""Build hook: what the overlay runtime needs beside its packages, put where the installed packages find it.

- ``patchset_overlay.pth`` at the top of the wheel, so pip puts it straight into site-packages: Python runs its
  ``import`` line at start-up in every process of the environment (Ray workers included), which is how the overlays
  switch themselves on. Editable installs do not get it (activate explicitly there, see docs/guide.md).
- The series (``patches/upstreams.toml``, each series folder's ``series`` and patch files) inside
  ``patchset_overlay/patches``: the overlays derive each fix from its patch file on the installed release
  (`patchset_overlay.derive`), so a wheel carries the very patches ``scripts/apply.sh`` applies.

setuptools has no declarative way to place a file at the wheel's root or to take package data from outside the
package folder, so these two copies stay here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PTH_FILE = "patchset_overlay.pth"
SERIES_TARGET = Path("patchset_overlay") / "patches"


def _series_files() -> list[Path]:
    """upstreams.toml, and each series folder's ``series`` and the patch files it lists (relative to patches/)."""
    root = HERE / "patches"
    found = [Path("upstreams.toml")]
    for series in sorted(root.glob("*/series")):
        found.append(series.relative_to(root))
        for line in series.read_text(encoding="utf-8").splitlines():
            name = line.split("#", 1)[0].strip()
            if name:
                found.append(series.parent.relative_to(root) / name)
    return found


class BuildPyWithRuntimeFiles(build_py):
    def run(self) -> None:
        super().run()
        for target, source in self._runtime_files().items():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)

    def _runtime_files(self) -> dict[Path, Path]:
        build = Path(self.build_lib)
        files = {build / PTH_FILE: HERE / PTH_FILE}
        files.update({build / SERIES_TARGET / name: HERE / "patches" / name for name in _series_files()})
        return files

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *(str(path) for path in self._runtime_files())]


setup(cmdclass={"build_py": BuildPyWithRuntimeFiles})
