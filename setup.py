"""Build hook: ship ``patchset_overlay.pth`` at the top of the wheel, so pip puts it straight into site-packages.

Python runs the ``import`` line of every ``.pth`` file in site-packages at start-up, in every process of the
environment (Ray workers included), which is how the overlays switch themselves on. Copying the file into
``build_lib`` makes it part of the wheel's purelib root for ``pip install .`` and for built wheels alike;
editable installs do not get it (activate explicitly there, see README).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_FILE = "patchset_overlay.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / PTH_FILE
        shutil.copyfile(Path(__file__).resolve().parent / PTH_FILE, target)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH_FILE)]


setup(cmdclass={"build_py": BuildPyWithPth})
