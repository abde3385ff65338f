"""Upstream objects changed in place, each change with its exact undo: every reference to them keeps working
(``from ... import``, ``functools.partial``, pickles).
"""

from __future__ import annotations

import builtins
import dataclasses
import dis
from collections.abc import Callable, Collection
from types import CodeType, FunctionType, ModuleType
from typing import Any

Undo = Callable[[], None]
_MISSING = object()
# a module's own identity: replaced code reads the upstream module's, as the patched upstream function would
_MODULE_IDENTITY = {"__name__", "__file__", "__package__", "__spec__"}
_FUNCTION_PARTS = ("__code__", "__defaults__", "__kwdefaults__", "__doc__", "__annotations__")


class ReplaceError(RuntimeError):
    """A replacement could not be made safely; nothing of it was changed."""


def _global_names(code: CodeType) -> set[str]:
    names = {ins.argval for ins in dis.get_instructions(code) if ins.opname == "LOAD_GLOBAL"}
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _global_names(const)
    return names


def _same_object(theirs: Any, ours: Any) -> bool:
    """The very object; for a module, the module of that name (a package may swap its ``sys.modules`` entry after
    import, e.g. transformers' lazy module, so two importers can hold two objects of one module)."""
    if theirs is ours:
        return True
    return isinstance(theirs, ModuleType) and isinstance(ours, ModuleType) and theirs.__name__ == ours.__name__


def _check_globals(namespace: dict[str, Any], replacement: FunctionType, where: str, new: Collection[str] = ()) -> None:
    """Every global ``replacement`` reads (but ``new``, the names added with it) is in ``namespace`` (or a builtin)
    and is the very object ``replacement`` was written against."""
    for name in sorted(_global_names(replacement.__code__) - _MODULE_IDENTITY - set(new)):
        theirs = namespace.get(name, getattr(builtins, name, _MISSING))
        ours = replacement.__globals__.get(name, getattr(builtins, name, _MISSING))
        if theirs is _MISSING or not _same_object(theirs, ours):
            raise ReplaceError(f"{where}: global {name!r} differs from the overlay's")


def replace_function_code(target: FunctionType, replacement: FunctionType, new: Collection[str] = ()) -> Undo:
    """Give ``target`` the code, defaults and docs of ``replacement``, keeping the function object itself, once its
    globals pass `_check_globals`; it may close over ``target``'s own names (a method's ``__class__``)."""
    if target.__code__.co_freevars != replacement.__code__.co_freevars:
        raise ReplaceError(f"{target.__qualname__}: the patched code closes over other names")
    _check_globals(target.__globals__, replacement, f"{target.__module__}.{target.__qualname__}", new)
    saved = {part: getattr(target, part) for part in _FUNCTION_PARTS}
    for part in _FUNCTION_PARTS:
        value = getattr(replacement, part)
        setattr(target, part, dict(value) if part == "__annotations__" else value)

    def undo() -> None:
        for part, value in saved.items():
            setattr(target, part, value)

    return undo


def set_module_value(module: ModuleType, name: str, value: Any) -> Undo:
    """Give module global ``name`` a new value; a list keeps its identity (its items are replaced), so that every
    holder of it sees the new items (Trinity's ``validators``)."""
    current = module.__dict__.get(name, _MISSING)
    if isinstance(current, list) and isinstance(value, list):
        saved = list(current)
        current[:] = value

        def undo_items() -> None:
            current[:] = saved

        return undo_items
    return set_class_attributes(module, {name: value})


def set_class_attributes(owner: type | ModuleType, attributes: dict[str, Any]) -> Undo:
    """Set (or add) attributes of a class (instances made before, after, or unpickled all see them) or a module."""
    saved = {name: vars(owner).get(name, _MISSING) for name in attributes}
    for name, value in attributes.items():
        setattr(owner, name, value)

    def undo() -> None:
        for name, value in saved.items():
            if value is not _MISSING:
                setattr(owner, name, value)
            elif name in vars(owner):  # added here: removed again, unless someone did already
                delattr(owner, name)

    return undo


def _subclasses_parents_first(cls: type) -> list[type]:
    found: list[type] = []
    pending = [cls]
    while pending:
        current = pending.pop()
        if current not in found:
            found.append(current)
            pending.extend(current.__subclasses__())
    return sorted(found, key=lambda klass: len(klass.__mro__))


def _regenerate_dataclass(cls: type) -> None:
    """Run ``dataclasses.dataclass`` on ``cls`` again, so its generated methods see the fields as they are now."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    own = cls.__dict__.get("__annotations__", {})
    for name in own:
        existing = cls.__dataclass_fields__.get(name)  # type: ignore[attr-defined]
        # a field with a default factory has no class attribute left: give dataclass its Field back
        if existing is not None and existing._field_type is dataclasses._FIELD and name not in cls.__dict__:
            setattr(cls, name, existing)
    for part in ("__init__", "__repr__", "__eq__", "__match_args__"):
        if part in cls.__dict__:
            delattr(cls, part)
    if cls.__dict__.get("__hash__", _MISSING) is None:
        delattr(cls, "__hash__")
    options = {key: getattr(params, key) for key in ("init", "repr", "eq", "order", "unsafe_hash", "frozen")}
    dataclasses.dataclass(cls, **options)


def set_dataclass_field(cls: type, name: str, annotation: Any, default: Any, after: str | None) -> Undo:
    """Give dataclass ``cls`` (and its dataclass subclasses) the field ``name`` in place, or right after ``after``;
    ``dataclasses`` itself makes their methods again, as if the class had been written with the field."""
    own = cls.__dict__.get("__annotations__", {})
    if not dataclasses.is_dataclass(cls) or (name not in own and after is not None and after not in own):
        raise ReplaceError(f"{cls.__qualname__} has no own dataclass field {after!r} to add {name!r} after")
    classes = _subclasses_parents_first(cls)
    saved = {klass: dict(klass.__dict__) for klass in classes}

    annotations = {} if name in own or after is not None else {name: annotation}
    for key, value in own.items():
        annotations[key] = annotation if key == name else value
        if key == after and name not in own:
            annotations[name] = annotation
    cls.__annotations__ = annotations
    setattr(cls, name, default)
    for klass in classes:
        _regenerate_dataclass(klass)

    def undo() -> None:
        for klass, before in saved.items():
            for key in [key for key in klass.__dict__ if key not in before]:
                delattr(klass, key)
            for key, value in before.items():
                if klass.__dict__.get(key, _MISSING) is not value:
                    setattr(klass, key, value)

    return undo


def add_module_globals(module: ModuleType, names: dict[str, Any]) -> Undo:
    """Give ``module`` the globals the patched module imports too; one it has must be the very same object (else
    nothing is changed), and the undo removes only those added here."""
    for name, value in names.items():
        present = module.__dict__.get(name, _MISSING)
        if present is not _MISSING and present is not value:
            raise ReplaceError(f"{module.__name__} already has a different global {name!r}")
    return set_class_attributes(module, {name: value for name, value in names.items() if name not in vars(module)})
