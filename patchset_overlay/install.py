"""One derived change made on the live upstream module, in place, with its exact undo (`patchset_overlay.replace`).

The code is compiled under the derived file's name and lines, so a traceback points at the patched line; a decorated
function is found under its wrappers. New statements and default values are evaluated in the module's namespace.
"""

from __future__ import annotations
import __future__

import ast
import copy
import dataclasses
import inspect
from types import CellType, CodeType, FunctionType, ModuleType
from typing import Any

from patchset_overlay.changes import Change, bound_names
from patchset_overlay.derive import Derived
from patchset_overlay.replace import (
    ReplaceError,
    Undo,
    add_module_globals,
    replace_function_code,
    set_class_attributes,
    set_dataclass_field,
    set_module_value,
)

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _compile(derived: Derived, node: ast.stmt) -> CodeType:
    """``node`` alone, decorators left out, compiled under the derived file's name and line numbers."""
    if isinstance(node, Function | ast.ClassDef):
        node = copy.copy(node)
        node.decorator_list = []
    return compile(ast.Module(body=[node], type_ignores=[]), derived.filename, "exec", flags=derived.parsed.flags)


def _code_named(code: CodeType, name: str) -> CodeType:
    return next(const for const in code.co_consts if isinstance(const, CodeType) and const.co_name == name)


def _innermost(obj: Any, name: str) -> FunctionType:
    """The function a member or module global holds under its decorators."""
    if isinstance(obj, staticmethod | classmethod):
        obj = obj.__func__
    elif isinstance(obj, property):
        obj = obj.fget
    obj = inspect.unwrap(obj)
    while isinstance(obj, FunctionType) and obj.__code__.co_name != name and obj.__closure__:
        inner = [cell.cell_contents for cell in obj.__closure__ if isinstance(cell.cell_contents, FunctionType)]
        named = [function for function in inner if function.__code__.co_name == name]
        if len(named) != 1:
            break
        obj = inspect.unwrap(named[0])
    if not isinstance(obj, FunctionType) or obj.__code__.co_name != name:
        raise ReplaceError(f"{name}: no function of that name under its decorators ({obj!r})")
    return obj


def _evaluated(node: ast.expr | None, namespace: dict[str, Any], derived: Derived, local: dict | None = None) -> Any:
    if node is None:
        return None
    code = compile(ast.Expression(body=node), derived.filename, "eval", flags=derived.parsed.flags)
    return eval(code, namespace, local)  # noqa: S307 - the patch's own expression, in upstream's module


def _annotation(node: ast.expr, namespace: dict[str, Any], derived: Derived) -> Any:
    """An annotation as upstream's module holds it: its text under ``from __future__ import annotations``."""
    if derived.parsed.flags & __future__.annotations.compiler_flag:
        return ast.unparse(node)
    return _evaluated(node, namespace, derived)


def _function(
    code: CodeType, node: Function, module: ModuleType, derived: Derived, closure: tuple = ()
) -> FunctionType:
    """A function of ``code`` in ``module``'s namespace, with the defaults and annotations ``node`` declares."""
    namespace = vars(module)
    args = node.args
    defaults = tuple(_evaluated(value, namespace, derived) for value in args.defaults) or None
    function = FunctionType(code, namespace, node.name, defaults, closure or None)
    function.__kwdefaults__ = {
        arg.arg: _evaluated(value, namespace, derived)
        for arg, value in zip(args.kwonlyargs, args.kw_defaults, strict=True)
        if value is not None
    } or None
    arguments = [*args.posonlyargs, *args.args, args.vararg, *args.kwonlyargs, args.kwarg]
    annotations = [(arg.arg, arg.annotation) for arg in arguments if arg is not None] + [("return", node.returns)]
    function.__annotations__ = {
        key: _annotation(value, namespace, derived) for key, value in annotations if value is not None
    }
    function.__doc__ = ast.get_docstring(node, clean=False)
    return function


def _replace(target: FunctionType, code: CodeType, node: Function, module: ModuleType, derived: Derived, new) -> Undo:
    replacement = _function(code, node, module, derived, target.__closure__ or ())
    return replace_function_code(target, replacement, new)


def _new_attribute_defaults(init: Function, before: FunctionType, cls: type, module: ModuleType, derived: Derived):
    """{attribute: default} for each ``self.X = X`` the patched ``__init__`` adds for a parameter with a default:
    an object made before the change (or unpickled from a process without it) then reads what the patched
    ``__init__`` gives a caller that does not pass it."""
    defaults = dict(
        zip([arg.arg for arg in init.args.args][-len(init.args.defaults) :], init.args.defaults, strict=False)
    )
    defaults.update((arg.arg, value) for arg, value in zip(init.args.kwonlyargs, init.args.kw_defaults, strict=False))
    found = {}
    for node in init.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Name)):
            continue
        target = node.targets[0]
        is_self = isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
        if not is_self or defaults.get(node.value.id) is None or hasattr(cls, target.attr):
            continue
        if target.attr not in before.__code__.co_names:
            found[target.attr] = _evaluated(defaults[node.value.id], vars(module), derived)
    return found


def _chain(*undos: Undo) -> Undo:
    def undo() -> None:
        for step in reversed(undos):
            step()

    return undo


def apply_change(module: ModuleType, derived: Derived, change: Change) -> Undo:
    """Make ``change`` on ``module``; return its exact undo. Raises ReplaceError where it cannot be made safely."""
    assert derived.parsed is not None
    node = next(node for node in derived.parsed.tree.body if derived.parsed.key(node) == change.name)
    namespace = vars(module)
    if change.kind == "statement":
        scratch: dict[str, Any] = {}
        exec(_compile(derived, node), namespace, scratch)  # noqa: S102 - the patch's own statement, in upstream's module
        if isinstance(node, Function | ast.ClassDef) and node.decorator_list:
            raise ReplaceError(f"{module.__name__}.{change.name}: a new decorated definition is not supported")
        return add_module_globals(module, {name: scratch[name] for name in bound_names(node)})
    # names the derived module binds that the live one lacks: replaced code reads them only where upstream's own may
    # (an optional import), or once the patch's own statements are made
    new = {name for name in derived.parsed.binds if name not in namespace}
    if change.kind == "function":
        assert isinstance(node, Function)
        target = _innermost(namespace[change.name], change.name)
        return _replace(target, _code_named(_compile(derived, node), change.name), node, module, derived, new)
    if change.kind == "assignment":
        return set_module_value(module, change.name, _evaluated(node.value, namespace, derived))
    assert isinstance(node, ast.ClassDef)
    cls = namespace[change.name]
    if change.kind == "class-doc":
        return set_class_attributes(cls, {"__doc__": ast.get_docstring(node, clean=False)})
    member = next(item for item in node.body if change.member in bound_names(item))
    if isinstance(member, Function):
        class_code = _code_named(_compile(derived, node), node.name)
        code = _code_named(class_code, change.member)
        if change.member in vars(cls):
            target = _innermost(vars(cls)[change.member], change.member)
            if change.member != "__init__":
                return _replace(target, code, member, module, derived, new)
            attributes = _new_attribute_defaults(member, target, cls, module, derived)
            return _chain(_replace(target, code, member, module, derived, new), set_class_attributes(cls, attributes))
        closure = (CellType(cls),) if code.co_freevars == ("__class__",) else ()
        function = _function(code, member, module, derived, closure)
        function.__qualname__ = f"{cls.__qualname__}.{change.member}"
        value: Any = function
        for decorator in reversed(member.decorator_list):
            value = _evaluated(decorator, namespace, derived)(value)
        return set_class_attributes(cls, {change.member: value})
    value = _evaluated(member.value, namespace, derived, dict(vars(cls))) if member.value is not None else None
    if isinstance(member, ast.AnnAssign) and dataclasses.is_dataclass(cls):
        annotation = _annotation(member.annotation, namespace, derived)
        names = [bound_names(item)[0] for item in node.body if isinstance(item, ast.AnnAssign)]
        index = names.index(change.member)
        after = names[index - 1] if index else None
        return set_dataclass_field(cls, change.member, annotation, value, after)
    return set_class_attributes(cls, {change.member: value})
