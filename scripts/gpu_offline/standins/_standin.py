"""OFFLINE GPU MACHINES ONLY: the shared body of the `ray` and `wandb` stand-ins (see ../README.md).

A stand-in package answers every attribute and submodule with a placeholder, so that modules which import it at
module level (verl's ``verl/protocol.py`` imports ray; Trinity's ``trinity/utils/monitor.py`` imports wandb) can be
imported. Nothing the GPU proof runs calls them; a call that reaches one raises, naming it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

DECORATORS = ("remote", "method")  # ray's decorators, which modules apply at import time


class Placeholder:
    """Any attribute of a stand-in package: as ray's decorators it leaves what it decorates alone; other calls raise."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> Placeholder:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return Placeholder(f"{self._name}.{attribute}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._name.rsplit(".", 1)[-1] in DECORATORS or self._name.endswith("()"):
            if len(args) == 1 and not kwargs and callable(args[0]):
                return args[0]  # @ray.remote on a class, or @ray.remote(num_cpus=1)(cls): the class unchanged
            return Placeholder(f"{self._name}()")  # ray.remote(num_cpus=1): a decorator factory
        package = self._name.split(".")[0]
        raise RuntimeError(f"{self._name} was called, but {package} is a stand-in on this offline machine")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)

    def __instancecheck__(self, instance: Any) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<stand-in {self._name}>"


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes ``<package>.<anything>`` importable as a stand-in module too (``from ray.actor import ActorHandle``)."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name, f"OFFLINE STAND-IN for {spec.name}: not the real package")
        module.__path__ = []  # a package: its submodules resolve through this finder too
        module.__getattr__ = Placeholder(spec.name).__getattr__  # type: ignore[method-assign]
        return module

    def exec_module(self, module):
        pass


def install(package: str, namespace: dict) -> None:
    """Fill ``namespace`` (the stand-in package's own) with placeholders and register its submodule finder."""
    namespace["__getattr__"] = Placeholder(package).__getattr__
    namespace["__version__"] = "0.0.0+standin"
    namespace["STANDIN"] = True
    if not any(isinstance(finder, _Submodules) and finder.package == package for finder in sys.meta_path):
        sys.meta_path.append(_Submodules(package))
